"""The edgefleet edge agent."""
