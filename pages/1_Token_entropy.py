"""Token entropy: generate an answer and see the next-token entropy of every prompt and answer token."""

import streamlit as st

from lenscope.app.docs import docs_link
from lenscope.app.predictions import predict_typed, shipped_table, show_predictions
from lenscope.app.runner import error_boundary, run_job
from lenscope.app.widgets import get_store, model_picker, show_figure, show_table
from lenscope.figures.entropy import entropy_heatmap, entropy_profile
from lenscope.jobs.runs.generate import GenerationSettings, generate_cached
from lenscope.jobs.runs.token_view import entropy_summary, token_table

st.set_page_config(page_title="Token entropy · lenscope", layout="wide")
st.title("Token entropy")
st.caption("How unsure the target model is about the token after each position: the entropy EGTP pools by.")
docs_link("guide/token-entropy")

with st.expander("Length predictors shipped with lenscope: their accuracy on the study's test runs",
                 expanded="entropy_run_id" not in st.session_state):
    shipped_table()
target = model_picker()
if target is None:
    st.stop()
store = get_store()

with st.form("generate"):
    prompt = st.text_area("Prompt", key="entropy_prompt", height=120,
                          placeholder="Ask the model something, e.g. 'Explain what a hash map is.'")
    c1, c2, c3 = st.columns(3)
    max_new = c1.number_input("Max new tokens", 1, 2048, 128, key="entropy_max_new")
    temperature = c2.number_input("Temperature", 0.0, 2.0, 0.7, step=0.1, key="entropy_temperature")
    seed = c3.number_input("Seed", 0, 2**31 - 1, 0, key="entropy_seed")
    submitted = st.form_submit_button("Generate", type="primary")

if submitted:
    if not prompt.strip():
        st.error("The prompt is empty: type something to send to the model.")
        st.stop()
    settings = GenerationSettings(int(max_new), float(temperature), 1.0, int(seed))
    generated = run_job(lambda on_progress: generate_cached(store, target, prompt, settings, on_progress=on_progress),
                        start="Generating...")
    if generated is None:
        st.stop()
    with error_boundary():
        st.session_state["entropy_predictions"] = predict_typed(target, prompt)  # from the prompt alone
    st.session_state["entropy_run_id"] = generated[0].id
    st.session_state["entropy_cache_hit"] = generated[1]

run_id = st.session_state.get("entropy_run_id")
if run_id is None:
    st.info("Type a prompt and press Generate.")
    st.stop()

with error_boundary():  # e.g. a damaged tensor file: said so, and the next Generate regenerates it
    run = store.load_run(run_id, layers=[])
table = token_table(run, target.tokenizer)
status = "from the cache" if st.session_state.get("entropy_cache_hit") else "generated now"
st.subheader("Answer")
st.markdown(f"Run #{run.id} · {status} · {run.prompt_len} prompt tokens · **{run.output_length} answer "
            f"tokens** ({'ended with end-of-turn' if run.finished else 'stopped at the token cap'})")
st.text(run.response)
predictions = st.session_state.get("entropy_predictions")
if predictions is not None:
    st.subheader("Predicted length, before the answer")
    show_predictions(predictions, run.output_length, run.finished)
width = st.slider("Tokens per row", 8, 32, 16, key="entropy_width")
show_figure(entropy_heatmap(table, width), "entropy-heatmap", width="stretch")
show_figure(entropy_profile(table), "entropy-profile", width="stretch")
summary = entropy_summary(table)
c1, c2, c3 = st.columns(3)
c1.metric("Mean entropy, prompt", f"{summary['prompt']:.3f}")
c2.metric("Mean entropy, answer", f"{summary['answer']:.3f}")
c3.metric("Max entropy", f"{summary['max']:.3f}")
with st.expander("Token table"):
    show_table(table, f"run-{run.id}-entropy", width="stretch", hide_index=True)
