"""Stand-ins for modules that transformers' test_modeling_common.py / test_configuration_common.py import but
that the transformers source distribution does not ship. Each is used only when the sdist lacks the real one."""
