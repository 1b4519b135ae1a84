"""The Lambda platform: stacks deployed from ``template.yaml`` by CloudFormation (on AWS, or on
moto as a local stack), whose coordinator and workers are Lambda functions.

- ``outputs``: a stack's CloudFormation outputs, and what they say (its functions' environment,
  its data bucket, the channel fields it provides);
- ``find``: a stack found by name, a local stack's record first, then AWS;
- ``stack``: ``LambdaStack``, the platform interface (``lambdaml.platforms.base``) on Lambda;
- ``concurrency``: whether a job's workers can all run at once (reserved concurrency);
- ``invoke``: invoking a function, synchronously or asynchronously;
- ``logs``: a job's lines from CloudWatch Logs (Lambda's START lines mark its invocations);
- ``context``: Lambda's context object, read as the worker's lifetime;
- ``failures``: Lambda's on-failure record of a worker it gave up on, and what the coordinator does;
- ``handlers``: the coordinator and worker functions, which ``functions/*/app.py`` call.
"""
