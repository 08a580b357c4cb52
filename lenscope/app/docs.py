"""The docs in the app: a page's link to its docs page, and the Docs page that shows any page of ``docs/``."""

from __future__ import annotations

import streamlit as st

from lenscope.docs.pages import nav, page_parts, page_url


def docs_link(slug: str, what: str = "How to read this page") -> None:
    """One line linking to the docs page ``slug`` (``guide/token-entropy``), which the Docs page shows."""
    title = nav().get(slug)
    if title is None:
        raise ValueError(f"no docs page {slug!r}")
    st.caption(f"{what}: [{title} in the docs]({page_url(slug)}).")


def docs_page() -> None:
    """The Docs page: a picker of every docs page (``?page=`` opens one) and the page itself."""
    pages = nav()
    if not pages:
        st.info("This copy of lenscope holds no docs/ folder.")
        return
    asked = st.query_params.get("page", "index")
    slugs = list(pages)
    slug = st.selectbox("Page", slugs, index=slugs.index(asked) if asked in pages else 0,
                        format_func=lambda s: pages[s], key="docs_page")
    if slug != asked:
        st.query_params["page"] = slug
    if asked not in pages and asked != "index":
        st.warning(f"No docs page {asked!r}; showing {pages[slug]!r}.")
    for part in page_parts(slug):
        if part.image is not None:
            st.image(str(part.image), caption=part.markdown or None)
        else:
            st.markdown(part.markdown)
