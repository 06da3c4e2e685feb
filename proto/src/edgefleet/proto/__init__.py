"""edgefleet wire protocol. Generated modules live in ``edgefleet.proto.v1``; they are internal to the
edge and cloud members and never part of the SDK's public API."""
