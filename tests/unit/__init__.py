"""Unit tests: each calls one module's functions directly, in folders that mirror the packages
(unit/orchestrator/<layer>/test_<module>.py, unit/worker/<room>/test_<module>.py). Every folder here is a
package, so that two test modules of one name (views/ and tools/ both have a crosscheck) live side by side."""
