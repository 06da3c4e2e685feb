"""An example edgefleet plugin: a brightness meter built from one entry of every extension kind.

Each entry point of this distribution names a ``register`` function that registers one entry with the
SDK's ``register_<kind>``; the SDK calls it the first time it looks in that kind's registry.
"""
