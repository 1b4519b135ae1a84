"""The clouds a stack is deployed on: the interface the stack backend drives a job through
(``base``) and one package per platform that implements it (``aws_lambda``, the one built).

A platform package holds everything that knows its cloud: how a deployed stack is found and
read, how its coordinator is invoked, what capacity it has, where its functions log, and the
handlers its functions run. The worker core and the runtime import none of it.
"""
