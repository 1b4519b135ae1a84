#!/bin/bash
# LambdaML node bootstrap (uploaded by `lambdaml iaas launch`, run by each node's user data):
# install the package wheel from the data bucket, then run this node's rank with torchrun.
#   --head                     this node hosts torchrun's rendezvous and writes the result
#   --rendezvous IP            the head's private address (the other nodes)
set -euo pipefail

HEAD=0 RENDEZVOUS="" NODES="" PORT=29400 BUCKET="" JOB_ID="" PACKAGE="" REGION=us-east-1
while [ $# -gt 0 ]; do
  case "$1" in
    --head) HEAD=1; shift ;;
    --rendezvous) RENDEZVOUS="$2"; shift 2 ;;
    --nodes) NODES="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --bucket) BUCKET="$2"; shift 2 ;;
    --job-id) JOB_ID="$2"; shift 2 ;;
    --package) PACKAGE="$2"; shift 2 ;;
    --region) REGION="$2"; shift 2 ;;
    *) echo "bootstrap: unknown argument $1" >&2; exit 2 ;;
  esac
done

dnf install -y -q python3.11 python3.11-pip
python3.11 -m venv /opt/lambdaml
aws s3 cp "s3://${BUCKET}/${PACKAGE}" /opt/
# torch's CPU wheels: the default index would pull the CUDA build.
/opt/lambdaml/bin/pip install -q --extra-index-url https://download.pytorch.org/whl/cpu "/opt/$(basename "$PACKAGE")[torch]"

# gloo on the instance's primary interface, the one the security group admits members on.
export GLOO_SOCKET_IFNAME="$(ip -o -4 route show to default | awk '{print $5}')"
export LAMBDAML_TORCH_THREADS=0  # one process per node: let torch use every vCPU
if [ "$HEAD" = 1 ]; then
  RENDEZVOUS="$(hostname -I | awk '{print $1}')"
  EXTRA=(--rdzv-conf is_host=1)
  ASSEMBLE=(--assemble)
else
  EXTRA=()
  ASSEMBLE=()
fi
exec /opt/lambdaml/bin/torchrun --nnodes "$NODES" --nproc-per-node 1 \
  --rdzv-backend c10d --rdzv-id "$JOB_ID" --rdzv-endpoint "${RENDEZVOUS}:${PORT}" "${EXTRA[@]}" \
  -m lambdaml.runtime.iaas --job-id "$JOB_ID" --bucket "$BUCKET" --region "$REGION" "${ASSEMBLE[@]}"
