"""Generated protobuf and gRPC modules (tools/gen-proto). Internal: not a public API."""
