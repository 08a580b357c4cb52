"""Docs: the documentation site's pages (docs/), read in the app, offline; the other pages link here."""

import streamlit as st

from lenscope.app.docs import docs_page

st.set_page_config(page_title="Docs · lenscope", layout="wide")
st.title("Docs")
st.caption("The pages of the documentation site (`make docs` builds it with the API reference); their tables are "
           "rendered from the shipped results.")
docs_page()
