import pytest
from helpers import SWITCHES, switch_id


@pytest.fixture(params=SWITCHES, ids=[switch_id(s) for s in SWITCHES])
def switches(request):
    return request.param
