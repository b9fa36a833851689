"""Generated protocol buffer code of serve/proto/strata/v1/sampler.proto
(regenerate with scripts/gen-proto.sh; do not edit sampler_pb2.py)."""
