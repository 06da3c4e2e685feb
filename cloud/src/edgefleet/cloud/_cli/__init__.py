"""The commands edgefleet-cloud adds to ``edgefleet`` (entry points in the ``edgefleet.cli`` group):
``_commands`` (controller, models push|ls, devices, deploy, rollout), ``_security_commands`` (certs, the
CLI's TLS/token settings), ``_telemetry_commands`` (telemetry tail|show), rendered by ``_display``."""
