"""Named-field events to the model's vector by a declared feature spec (``OLU_FEATURES_FILE``).

spec.py parses and checks the spec; transform.py is the one reference implementation of the
vector (the worker's Python decoder, the planner and the subscriber call it; the worker's
compiled JSON reader follows the same arithmetic from the tables of tables.py, and a test holds
them to the same bits). Nothing here does I/O but reading the spec file.
"""
