"""The ``edgefleet`` command. Members add sub-commands through the ``edgefleet.cli`` entry-point group."""
