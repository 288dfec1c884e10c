"""Telemetry emitters of the vectorized loop (typed inputs in, TelemetryEvents out)."""
