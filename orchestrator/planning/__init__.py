"""Planning: inventory x sweep -> Plan (jobs, cases, limits), and the rendered scripts and worker bundle
a plan runs with. Pure but for writing the rendered files."""
