"""The SDK's public kit: the helpers the other members (edgefleet-edge, edgefleet-cloud) and applications
share, so that edge and cloud import only public names and never ``edgefleet.sdk._*``.

- names: :data:`NAME_RE`, the one rule for model names, device ids and fleet-CA names;
- addresses: :func:`host_port_problem`, :func:`connect_problem`, :func:`can_probe`, :func:`tcp_problem`;
  MQTT broker URLs: :func:`parse_broker_url` and :class:`BrokerAddress` (one parser for agent and controller);
- the MQTT topic scheme (``_topics``), ``edgefleet/v1/<fleet>/<device>/<kind>``: :data:`TOPIC_ROOT`,
  :data:`TOPIC_KINDS`, :data:`ACK_KIND`, :func:`device_topic`, :func:`ack_topic`, :func:`topic_filters`
  (with :data:`INGEST_SHARE_GROUP`), :func:`acl_topics` / :class:`AclTopics` (the broker ACL's),
  :func:`parse_topic` and :class:`TopicError`, :func:`topic_level_problem`;
- TLS: :func:`client_context`, fleet certificate roles (:data:`ROLES`, :func:`certificate_role`,
  :func:`common_name`);
- redaction of credentials: :func:`redact`, :func:`redact_uri`;
- lazy package facades: :func:`lazy_getattr`, :func:`attach_stub`;
- the ONNX file check: :func:`check_model_file`;
- pipeline specs (``_spec``): :class:`PipelineSpec`, :func:`load_pipeline_spec`, :func:`read_pipeline_spec`,
  :func:`diff_specs`, :func:`plan_live_change` / :class:`LivePlan`, :func:`secret_refs`,
  :func:`resolve_secrets`, :func:`stream_id`; sealed camera secrets (``_sealing``): :func:`seal`,
  :func:`unseal`, :func:`public_key_pem`, :class:`SealingError`;
- config files: :func:`load_yaml_mapping`, :func:`validate_mapping`, :func:`format_validation_error`;
- the CLI: :func:`fail` (one ``error:`` line and a non-zero exit), :func:`set_log_level`; the long-running
  commands' logs: :func:`configure_logs` (text with UTC timestamps or JSON lines, the context of every line),
  :func:`set_log_fields` (fields on every line: the device id), :class:`JsonLinesFormatter`;
- versions: :func:`distribution_version`.

Names load on first use (``__init__.pyi`` lists them), so importing the kit costs nothing.

Example::

    from edgefleet.sdk.kit import parse_broker_url, redact_uri

    assert parse_broker_url("mqtts://broker.example").port == 8883
    assert redact_uri("rtsp://admin:pw@10.0.0.5/live") == "rtsp://admin:***@10.0.0.5/live"
"""

from __future__ import annotations

from .._lazy import attach_stub

__getattr__, __dir__, __all__ = attach_stub(__name__, __file__)
