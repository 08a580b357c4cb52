"""Attribution: are high-entropy prompt tokens the ones the length head relies on?"""

import streamlit as st

from lenscope.egtp_jobs import (ABLATION_KIND, ATTRIBUTION_KIND, PAPER_PEARSON, STATIC_KIND, ablation_config, attribution_config, load_predictor,
                                predictor_name, run_attribution, token_attribution, train_static)
from lenscope.figures.egtp import entropy_importance_scatter, token_bars
from lenscope.runs import generate_cached
from lenscope.ui import dataset_picker, get_store, head_settings, model_picker, run_job
from models.engine import GenerationSettings

st.set_page_config(page_title="Attribution · lenscope", layout="wide")
st.title("Token attribution")
st.markdown(
    "Importance of a prompt token = L2 norm of the gradient of the static head's MSE loss with respect to "
    "the token's hidden state at the **attribution layer**. At the head's own layer the gradient only "
    "passes the pooling: an EGTP head then gives importance proportional to its entropy weight *by "
    "construction*, a mean head gives every token of a prompt the same importance. Below the head layer "
    "the gradient runs through the model's own layers; **the mean-pooling head on that path is the fair "
    "test** of the paper's claim (no entropy in the gradient path)."
)
store = get_store()
dataset = dataset_picker(store)
if dataset is not None:
    layer, alpha = head_settings()
    attr_layer = int(st.sidebar.number_input("Attribution layer", min_value=0, max_value=layer, value=min(15, layer)))
    config = attribution_config(dataset, layer, attr_layer, alpha)
    if st.button("Compute attribution (trains missing heads)"):
        def attribution_job(on_progress):
            if store.get_result(ABLATION_KIND, ablation_config(dataset, layer, alpha)) is None:
                train_static(store, dataset, layer=layer, alpha=alpha, on_progress=on_progress)
            target = model_picker() if attr_layer < layer else None
            return run_attribution(store, dataset, layer, attr_layer, alpha, target.model if target else None,
                                   on_progress=on_progress)

        run_job(attribution_job)
    result = store.get_result(ATTRIBUTION_KIND, config)
    if result is None:
        st.info(f"No attribution for dataset {dataset!r}, head layer {layer}, attribution layer {attr_layer} yet: "
                f"click the button above or run `python -m lenscope train-egtp --dataset {dataset} --layer {layer}` "
                f"then `python -m lenscope attribution --dataset {dataset} --layer {layer} --attr-layer {attr_layer}`.")
    else:
        summaries = {s["head"]: s for s in result["summaries"]}
        st.subheader("Entropy vs importance over the test prompts")
        st.dataframe([{"head": s["head"], "gradient path": s["path"], "Pearson r": round(s["pearson"], 3),
                       "95% CI": f"[{s['pearson_ci'][0]:.3f}, {s['pearson_ci'][1]:.3f}]",
                       "Spearman": round(s["spearman"], 3), "tokens": s["n_tokens"], "runs": s["n_runs"]}
                      for s in summaries.values()] + [{"head": "paper (EGTP)", "Pearson r": PAPER_PEARSON}])
        head_name = st.radio("Head", list(summaries), horizontal=True)
        runs = result["runs"]
        entropy = [h for r in runs for h in r["entropy"]]
        importance = [i for r in runs for i in r[f"importance_{head_name}"]]
        st.plotly_chart(entropy_importance_scatter(entropy, importance, summaries[head_name], PAPER_PEARSON))
        st.subheader("One prompt")
        source = st.radio("Prompt", ["test-set run", "type a prompt"], horizontal=True)
        if source == "test-set run":
            pick = st.selectbox("Run", runs, format_func=lambda r: f"run {r['run_id']}: "
                                f"{''.join(r['tokens'])[:80]!r} ({r['output_length']} tokens)")
            st.plotly_chart(token_bars(pick["tokens"], pick["entropy"], pick[f"importance_{head_name}"],
                                       f"run {pick['run_id']}, {head_name} head"))
        else:
            prompt = st.text_area("Prompt", "Write a short poem about autumn.")
            if st.button("Generate the answer (true length) and attribute"):
                target = model_picker()
                if target is not None:
                    head, meta, _ = load_predictor(store, STATIC_KIND, predictor_name(STATIC_KIND, dataset, layer, head_name))
                    run, _ = generate_cached(store, target, prompt, GenerationSettings(256, 0.7, 1.0, 0),
                                             sorted(set(target.default_layers()) | {layer, attr_layer}))
                    run = store.load_run(run.id, layers=[layer])
                    imp = token_attribution(head, meta, run, attr_layer, target.model)
                    p = run.prompt_len
                    st.plotly_chart(token_bars(run.features.tokens[:p], run.features.entropy[:p].tolist(), imp,
                                               f"typed prompt ({run.output_length} answer tokens), {head_name} head"))
