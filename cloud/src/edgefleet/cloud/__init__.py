"""The edgefleet controller and fleet CLI."""
