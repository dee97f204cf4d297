"""Capture: bounded peek, decode into column batches, durable changelog segments, advance."""
