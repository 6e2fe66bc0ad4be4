"""The coordinator: gang scheduling and job state over gRPC, state in SQLite."""
