"""The node agent: registers its slots, runs the workers the coordinator assigns, ships their output."""
