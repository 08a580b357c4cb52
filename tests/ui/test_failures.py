"""Failures on the pages: each says what to do, no traceback reaches the browser, the store stays intact."""

import pytest

from tests.apptest import open_page


def test_a_foreign_database_file_is_named_on_the_page(data_dir):
    data_dir.mkdir(parents=True)
    (data_dir / "lenscope.db").write_bytes(b"not a database" * 100)
    at = open_page("pages/7_Results.py").run()
    assert not at.exception
    assert any("is not a lenscope store" in e.value and "move it aside" in e.value for e in at.error)


@pytest.mark.model  # the page loads the embedded model itself
def test_a_damaged_run_is_said_on_the_token_page_and_the_next_generate_heals_it(data_dir):
    from lenscope.jobs.runs.store_check import check_store
    from lenscope.store.store import Store

    at = open_page("pages/1_Token_entropy.py").run()
    at.text_area(key="entropy_prompt").input("What is 2+2?")
    at.number_input(key="entropy_max_new").set_value(6)
    at.button[0].click().run()
    assert not at.exception and not at.error
    store = Store()
    (path,) = list(store.tensors.files())
    path.write_bytes(path.read_bytes()[:-10])  # truncated behind the app's back
    at.run()
    assert not at.exception
    assert any("is damaged" in e.value and "generate it again" in e.value for e in at.error)
    at.button[0].click().run()  # Generate again: the run is regenerated in place
    assert not at.exception and not at.error
    assert any("generated now" in m.value for m in at.markdown)
    check = check_store(store, grace_s=0)
    assert check.healthy and len(store.runs_frame()) == 1
