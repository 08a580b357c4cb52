"""The Docs page shows the docs/ pages in the app (a page's link lands on its guide page), and each page of the app
links to its guide page instead of repeating it."""

from __future__ import annotations

import pytest

from lenscope.docs.pages import page_url
from tests.apptest import open_page


def test_the_docs_page_opens_the_page_a_link_names(data_dir):
    at = open_page("pages/8_Docs.py")
    at.query_params["page"] = "guide/attribution"
    at.run()
    assert not at.exception
    assert at.selectbox(key="docs_page").value == "guide/attribution"
    text = " ".join(m.value for m in at.markdown)
    assert "# " in text and "lenscope:begin" not in text and ".md)" not in text


def test_an_unknown_docs_page_says_so(data_dir):
    at = open_page("pages/8_Docs.py")
    at.query_params["page"] = "../../etc/passwd"
    at.run()
    assert not at.exception and "No docs page" in at.warning[0].value


@pytest.mark.parametrize("page_file, slug", [("pages/1_Token_entropy.py", "guide/token-entropy"),
                                             ("pages/4_Pooling_ablation.py", "guide/pooling-ablation")])
def test_a_page_links_to_its_guide(data_dir, page_file, slug):
    at = open_page(page_file).run()
    assert not at.exception
    assert any(page_url(slug) in c.value for c in at.caption)
