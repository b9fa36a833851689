#!/usr/bin/env bash
# Regenerates the code of serve/proto/strata/v1/sampler.proto (checked in):
#   serve/servepb/sampler.pb.go, sampler_grpc.pb.go   (Go: protoc-gen-go, protoc-gen-go-grpc)
#   python/strata_pyg/_pb/sampler_pb2.py               (Python: protoc --python_out)
# with the pinned tools: Debian's protoc 3.21.12 (apt-get install protobuf-compiler),
# protoc-gen-go v1.36.12 and protoc-gen-go-grpc v1.6.2 (installed here into a
# temporary GOBIN). The Python gRPC stubs are hand-written
# (python/strata_pyg/_rpc.py, on grpc's generic API), so grpc_tools is not needed.
# The Python code protoc 3.21 writes loads with python3-protobuf 3.21
# (Debian 12, CI) and with newer protobuf releases alike.
set -euo pipefail
cd "$(dirname "$0")/.."

want=3.21.12
have=$(protoc --version | awk '{print $2}')
if [ "$have" != "$want" ]; then
  echo "gen-proto: protoc $have, want $want (Debian 12: apt-get install protobuf-compiler)" >&2
  exit 1
fi
gobin=$(mktemp -d)
trap 'rm -rf "$gobin"' EXIT
GOBIN=$gobin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$gobin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

protoc -I serve/proto \
  --plugin=protoc-gen-go="$gobin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$gobin/protoc-gen-go-grpc" \
  --go_out=. --go_opt=module=github.com/strata-gnn/strata \
  --go-grpc_out=. --go-grpc_opt=module=github.com/strata-gnn/strata \
  strata/v1/sampler.proto

py=$(mktemp -d)
trap 'rm -rf "$gobin" "$py"' EXIT
protoc -I serve/proto --python_out="$py" strata/v1/sampler.proto
mkdir -p python/strata_pyg/_pb
cp "$py/strata/v1/sampler_pb2.py" python/strata_pyg/_pb/sampler_pb2.py
echo "gen-proto: wrote serve/servepb/*.pb.go and python/strata_pyg/_pb/sampler_pb2.py"
