#!/bin/sh
# Runs whatever command the container is given (a worker, `prefect flow-run execute`, ...), as
# PID 1's replacement so that signals reach it. Kubernetes passes the flow-run command as args.
set -e
exec "$@"
