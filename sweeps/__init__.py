"""The shipped sweep specs, installed as package data so that `fleetbench init` can write them anywhere."""
