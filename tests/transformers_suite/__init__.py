"""Support code for tests/test_transformers_common.py: fetching transformers' common test mixins.

transformers' `ModelTesterMixin` (tests/test_modeling_common.py), `GenerationTesterMixin`
(tests/generation/test_utils.py) and `ConfigTester` (tests/test_configuration_common.py) are in the source
distribution of transformers, not in the wheel. `sdist.load_transformers_tests()` downloads the sdist of the
installed version with pip, keeps its `tests/` folder in a cache, and imports it as a package of its own name.
Where the sdist lacks a module that those files import, a stand-in from `standins/` takes its place.
Nothing of transformers' test code lives in this repository.
"""
