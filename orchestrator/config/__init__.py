"""Configuration: hosts.yaml and sweep specs read into validated models (one place for the limits'
defaults), and the starter files `init` writes."""
