"""Pooling ablation: test MAE of static soft-label heads with EGTP, max, last-token and mean pooling."""

import pandas as pd
import streamlit as st

from lenscope.analysis.papers import EGTP_POOLING_MAE
from lenscope.app.docs import docs_link
from lenscope.app.runner import run_job
from lenscope.app.study import dataset_picker, picked_shipped, shipped_notice
from lenscope.app.widgets import get_store, head_settings, show_figure, show_table
from lenscope.figures.egtp import ablation_pivot, head_variant_table, paired_table, pooling_ablation_figure
from lenscope.jobs.egtp.heads import stored_pooling_ablation, train_static

st.set_page_config(page_title="Pooling ablation · lenscope", layout="wide")
st.title("Pooling ablation")
st.caption("Static length prediction from the prompt: one soft-label head per pooling of its hidden states.")
docs_link("guide/pooling-ablation")


def show_ablation(result: dict, title: str) -> None:
    """A stored pooling ablation: MAE by pooling and scenario, the figure beside the paper, paired comparisons
    and head options."""
    ours = pd.DataFrame(result["rows"])
    st.subheader(title)
    show_table(ablation_pivot(result["rows"]), "pooling-ablation-mae")
    st.caption(f"Test MAE in tokens [95% bootstrap CI over prompts]; constant train-median baseline: "
               f"{result['constant_mae']:.2f}. Test runs per scenario: "
               f"{ours.groupby('scenario')['n'].first().to_dict()}.")
    show_figure(pooling_ablation_figure(ours, EGTP_POOLING_MAE), "pooling-ablation")
    if result.get("paired"):
        st.subheader("Paired comparisons on the same test prompts")
        show_table(paired_table(result["paired"]), "pooling-paired", hide_index=True)
    if result.get("head_variants"):
        st.subheader("Head options (EGTP pooling)")
        show_table(head_variant_table(result["head_variants"]), "pooling-head-options", hide_index=True)


store = get_store()
dataset = dataset_picker(store)
shipped = picked_shipped(store, dataset)
if shipped is not None:
    shipped_notice(store, shipped)
    result = shipped.pooling_ablation()
    if result is None:
        st.info(shipped.absent("pooling ablation"))
    else:
        show_ablation(result, f"Ours: the study, layer {shipped.layer}")
elif dataset is not None:
    layer, alpha = head_settings()
    if st.button("Train heads (all poolings)"):
        run_job(lambda on_progress: train_static(store, dataset, layer=layer, alpha=alpha, on_progress=on_progress))
    result = stored_pooling_ablation(store, dataset, layer, alpha)
    if result is None:
        st.info(f"No ablation for dataset {dataset!r} at layer {layer}, alpha {alpha} yet: click the button "
                f"above or run `python -m lenscope train-egtp --dataset {dataset} --layer {layer} "
                f"--alpha {alpha}`.")
    else:
        show_ablation(result, f"Ours: {dataset}, layer {layer}, alpha {alpha}")
st.subheader("Paper (reference only)")
st.caption("EGTP paper, pooling ablation on ForeLen with Qwen2.5-7B (MAE, tokens). Different models, data "
           "and length ranges: compare the ranking, not the values.")
show_table(EGTP_POOLING_MAE.set_index("pooling"), "egtp-paper-pooling-mae")
