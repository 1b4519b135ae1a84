"""Measure a target for the analytic model: channels, compute, start-up and loading.

``lambdaml calibrate`` runs this on the local machine (starting moto, Redis and Memcached
on loopback ports, or using given endpoints) or against a stack's resources, and builds a
``Calibration`` (``analytic_model.calibration``): the partial profile ``save_profile``
writes and ``load_profile`` lays over the AWS defaults. Each figure is measured through the
code the workers run:

- ``channels``: one worker's calls (latency, extra cost per batched value, bandwidth, CPU
  share), the store under load from several processes, a rank's batch delete;
- ``exchange``: processes running the real AllReduce and ScatterReduce: what a wait loses,
  how much workers moving bytes at once crowd each other, how much slower a pattern's bytes
  move in real rounds;
- ``compute``: one worker step through the algorithm's own step at two batch sizes, and a sparse
  step's rates per non-zero and per parameter;
- ``startup``: spawning a worker process and its imports, loading a shard from S3;
- ``gloo``: the iaas-local backend's torchrun group: its start-up, a ring step's latency and bandwidth;
- ``targets``: which endpoints to probe (local services or a stack's), a stack's start-up;
- ``assemble``: the figures into the profile.

On a local target all worker processes share this machine's cores; the profile records
how many (``faas.shared_cores``), so predictions for W workers on 2 cores are honest.
"""

from lambdaml.calibrate.assemble import calibrate, channel_figures
from lambdaml.calibrate.compute import ComputeProbe
from lambdaml.calibrate.probing import Effort, cores
from lambdaml.calibrate.targets import KINDS, local_channels, measure_stack_startup, stack_target

__all__ = [
    "KINDS",
    "ComputeProbe",
    "Effort",
    "calibrate",
    "channel_figures",
    "cores",
    "local_channels",
    "measure_stack_startup",
    "stack_target",
]
