"""The table of published language-model accuracy: its figures by value, its sources, its lookups
and its refusals."""

from __future__ import annotations

import math

import pytest

from dse.accuracy import AccuracyTableError
from dse.accuracy.llm_table import (
    LLM_COLUMNS,
    LLM_TABLE,
    load_llm_accuracy_table,
    weights_key,
)
from workloads import llm_names

HEADER = ",".join(LLM_COLUMNS)


@pytest.fixture(scope="module")
def table():
    return load_llm_accuracy_table()


def test_rows_per_model_and_every_row_has_its_source(table):
    frame = table.frame
    # llama-3-8b: DenoiseRotator 3, Neural Magic 3, MaskLLM 3, LLaMA3-Quantization 7 x 2
    # metrics, torchao 4; llama-3-70b: DenoiseRotator 6, LLaMA3-Quantization 4 x 2; each
    # LLaMA-2: the Wanda README's dense and 3 methods x (50%, 4:8, 2:4); 7B: MaskLLM 3.
    assert frame.groupby("model").size().to_dict() == {
        "llama-3-8b": 27, "llama-3-70b": 14, "mistral-7b": 3,
        "llama-2-7b": 13, "llama-2-13b": 10, "llama-2-70b": 10}
    assert set(table.models()) <= set(llm_names())
    assert (frame["status"] == "published").all()  # nothing interpolated, nothing guessed
    assert set(frame["source"]) == {
        "https://arxiv.org/abs/2505.23049",
        "https://huggingface.co/nm-testing/SparseLlama-3-8B-pruned_50.2of4-FP8",
        "https://github.com/NVlabs/MaskLLM/blob/50e50de8dc833714bb70a951d0ae37a5e79bcc7b/"
        "README.md",
        "https://arxiv.org/abs/2404.14047",
        "https://github.com/pytorch/ao/blob/bac039fc84867e128db860107ae21283ef1a763e/torchao/"
        "quantization/README.md",
        WANDA}
    for location in frame["location"]:
        assert "table" in location, location


@pytest.mark.parametrize(("model", "pattern", "metric", "value", "degradation", "method"), [
    # DenoiseRotator (arXiv:2505.23049), the baseline (unrotated) columns, by hand:
    ("llama-3-8b", "dense", "wikitext2_ppl", 6.14, 0.0, "dense"),
    ("llama-3-8b", "2:4", "wikitext2_ppl", 17.67, 17.67 - 6.14, "sparsegpt"),          # 11.53
    ("llama-3-70b", "dense", "wikitext2_ppl", 2.86, 0.0, "dense"),
    ("llama-3-8b", "unstructured@50%", "wikitext2_ppl", 9.57, 9.57 - 6.14, "sparsegpt"),  # 3.43
    ("llama-3-70b", "2:4", "wikitext2_ppl", 10.97, 10.97 - 2.86, "sparsegpt"),         # 8.11
    ("mistral-7b", "unstructured@50%", "wikitext2_ppl", 6.92, 6.92 - 5.95, "wanda"),    # 0.97
    ("mistral-7b", "2:4", "wikitext2_ppl", 10.18, 10.18 - 5.95, "wanda"),               # 4.23
    # zero-shot: points lost, higher accuracy is better, so dense - value.
    ("llama-3-70b", "2:4", "zeroshot_mean", 69.16, 80.05 - 69.16, "sparsegpt"),        # 10.89
    ("llama-3-70b", "unstructured@50%", "zeroshot_mean", 76.66, 80.05 - 76.66, "sparsegpt"),
])
def test_published_figures_by_value(table, model, pattern, metric, value, degradation, method):
    frame = table.frame
    row = frame[(frame["model"] == model) & (frame["pattern"] == pattern)
                & (frame["weights"] == "fp16") & (frame["metric"] == metric)
                & (frame["source"] == DENOISE)]
    assert len(row) == 1
    row = row.iloc[0]
    assert row["value"] == value
    assert row["degradation"] == pytest.approx(degradation, abs=1e-9)
    assert row["method"] == method


DENOISE = "https://arxiv.org/abs/2505.23049"
WANDA = ("https://github.com/locuslab/wanda/blob/1317b0ba3fab5cd0491961b41598138466647ebf/"
         "README.md")
MASKLLM = ("https://github.com/NVlabs/MaskLLM/blob/50e50de8dc833714bb70a951d0ae37a5e79bcc7b/"
           "README.md")
LLAMA3_QUANT = "https://arxiv.org/abs/2404.14047"
TORCHAO = ("https://github.com/pytorch/ao/blob/bac039fc84867e128db860107ae21283ef1a763e/"
           "torchao/quantization/README.md")


def test_llama_3_8b_2_4_takes_the_learned_mask(table):
    # MaskLLM's README, LLaMA-3 8B at 2:4 (sequence length 4096): dense 5.75, its SparseGPT
    # baseline 17.64 (+11.89), its learned mask 8.49 (+2.74). DenoiseRotator's SparseGPT is
    # +11.53 (17.67 - 6.14). The lookup takes the least increase: MaskLLM's, +2.74.
    hit = table.lookup("llama-3-8b", "2:4")
    assert (hit.value, hit.degradation, hit.method, hit.source) == (
        8.49, 2.74, "maskllm", MASKLLM)
    frame = table.frame
    sparsegpt = frame[(frame["source"] == MASKLLM) & (frame["method"] == "sparsegpt")
                      & (frame["model"] == "llama-3-8b")]
    assert sparsegpt[["value", "degradation"]].values.tolist() == [[17.64, 11.89]]


@pytest.mark.parametrize(("model", "weights", "metric", "value", "degradation", "method",
                          "source"), [
    # LLaMA3-Quantization (arXiv:2404.14047), LLaMA3-8B: dense 6.1 / 68.6; 4-bit group 128:
    # RTN 8.5 (+2.4), GPTQ 6.5 (+0.4), AWQ 6.6 (+0.5): GPTQ's is least.
    ("llama-3-8b", "int4-g128", "wikitext2_ppl", 6.5, 0.4, "gptq", LLAMA3_QUANT),
    # zero-shot mean: RTN 63.9 (4.7 lost), GPTQ 67.3 (1.3), AWQ 68.2 (0.4).
    ("llama-3-8b", "int4-g128", "zeroshot_mean", 68.2, 0.4, "awq", LLAMA3_QUANT),
    # int8 per channel: RTN 68.9 is above dense 68.6: a negative loss, kept as published.
    ("llama-3-8b", "int8", "zeroshot_mean", 68.9, -0.3, "rtn", LLAMA3_QUANT),
    # LLaMA3-70B: dense 2.9 / 75.3; GPTQ and AWQ both 3.3 / 74.9: the first row (GPTQ) wins.
    ("llama-3-70b", "int4-g128", "wikitext2_ppl", 3.3, 0.4, "gptq", LLAMA3_QUANT),
    ("llama-3-70b", "int4-g128", "zeroshot_mean", 74.9, 0.4, "gptq", LLAMA3_QUANT),
    # torchao (lm_eval word perplexity): dense 7.441, int4wo-64 8.316 (+0.875), its GPTQ
    # 7.921 (+0.48).
    ("llama-3-8b", "int4-g64", "wikitext2_ppl", 7.921, 0.48, "gptq", TORCHAO),
])
def test_quantised_dense_figures(table, model, weights, metric, value, degradation, method,
                                 source):
    hit = table.lookup(model, "dense", weights, metric)
    assert hit.status == "measured"
    assert hit.value == value
    assert hit.degradation == pytest.approx(degradation, abs=1e-9)
    assert (hit.method, hit.source) == (method, source)


def test_the_fp8_figure_is_against_its_sources_dense_fp16(table):
    # Neural Magic's model card: Open LLM Leaderboard v1 average, dense 62.16, 2:4 (SparseGPT
    # then distillation) 60.72, and that model with FP8 weights and activations 60.81.
    fp16 = table.lookup("llama-3-8b", "2:4", "fp16", "openllm_v1_mean")
    fp8 = table.lookup("llama-3-8b", "2:4", "fp8", "openllm_v1_mean")
    assert (fp16.value, fp16.degradation) == (60.72, 1.44)
    assert (fp8.value, fp8.degradation) == (60.81, 1.35)
    assert fp8.method == "sparsegpt+squarehead-kd+autofp8"
    assert "activations" in fp8.location  # said: more quantised than weight-only fp8
    # No dense fp8 figure was published: the dense fp8 design has no accuracy.
    assert table.lookup("llama-3-8b", "dense", "fp8", "openllm_v1_mean").status == "missing"


@pytest.mark.parametrize(("model", "pattern", "value", "degradation", "method"), [
    # The Wanda README's LLaMA-2 table (WikiText perplexity), by hand: dense 5.12 / 4.57 / 3.12.
    # 7B at 4:8: SparseGPT 8.12, Wanda 7.97 (+2.85), magnitude 16.48.
    ("llama-2-7b", "4:8", 7.97, 7.97 - 5.12, "wanda"),
    # 13B at 2:4: SparseGPT 8.32, Wanda 8.27 (+3.70).
    ("llama-2-13b", "2:4", 8.27, 8.27 - 4.57, "wanda"),
    # 70B at 50%: SparseGPT and Wanda both 3.98 (+0.86): the first row (SparseGPT) wins.
    ("llama-2-70b", "unstructured@50%", 3.98, 3.98 - 3.12, "sparsegpt"),
    ("llama-2-70b", "4:8", 4.47, 4.47 - 3.12, "wanda"),
])
def test_llama_2_takes_the_least_increase_of_three_methods(table, model, pattern, value,
                                                          degradation, method):
    hit = table.lookup(model, pattern)
    assert hit.status == "measured"
    assert hit.value == value
    assert hit.degradation == pytest.approx(degradation, abs=1e-9)
    assert (hit.method, hit.source) == (method, WANDA)
    assert "column llama2-" in hit.location


def test_llama_2_7b_2_4_takes_maskllm_over_the_one_shot_methods(table):
    # Wanda README 7B at 2:4: magnitude 54.59, SparseGPT 10.17 (+5.05), Wanda 11.02; MaskLLM's
    # README: dense 5.12, its SparseGPT 10.42 (+5.30), its learned mask 6.78 (+1.66): least.
    hit = table.lookup("llama-2-7b", "2:4")
    assert (hit.value, hit.degradation, hit.method, hit.source) == (6.78, 1.66, "maskllm",
                                                                    MASKLLM)
    frame = table.frame
    one_shot = frame[(frame["model"] == "llama-2-7b") & (frame["pattern"] == "2:4")
                     & (frame["method"] == "sparsegpt")].sort_values("value")
    assert one_shot[["value", "degradation"]].values.tolist() == [[10.17, 5.05], [10.42, 5.3]]


def test_the_abstracts_headline_matches_the_table(table):
    # The paper's abstract: on LLaMA3-70B, SparseGPT 2:4 degrades perplexity by 8.1 points.
    assert round(table.lookup("llama-3-70b", "2:4").degradation, 1) == 8.1


@pytest.mark.parametrize(("model", "pattern", "weights", "needle"), [
    ("llama-3-8b", "4:8", "fp16", "no published wikitext2_ppl for llama-3-8b at 4:8"),
    ("llama-3-8b", "2:4", "int4-g128", "with int4-g128 weights"),
    ("llama-3-8b", "2:4", "int8", "published: 2:4 fp16, dense fp16, dense int4-g128, "
     "dense int4-g64, dense int8, unstructured@50% fp16"),
    ("llama-3-8b", "4:8", "fp16", "not estimated"),  # 4:8 is published for LLaMA-2 only
    ("llama-2-7b", "1:4", "fp16", "published: 2:4 fp16, 4:8 fp16, dense fp16, "
     "unstructured@50% fp16"),
    ("mistral-7b", "dense", "int4-g128", "no published wikitext2_ppl for mistral-7b"),
    ("qwen2.5-7b", "2:4", "fp16", "no published figures for qwen2.5-7b"),
    ("mixtral-8x7b", "dense", "fp16", "models: llama-2-13b, llama-2-70b, llama-2-7b, "
     "llama-3-70b, llama-3-8b, mistral-7b"),
])
def test_formats_without_a_figure_have_no_accuracy(table, model, pattern, weights, needle):
    hit = table.lookup(model, pattern, weights)
    assert hit.status == "missing"
    assert math.isnan(hit.value) and math.isnan(hit.degradation)
    assert needle in hit.note


def test_llama_3_8b_zero_shot_is_not_in_the_table(table):
    # DenoiseRotator gives LLaMA3-8B's zero-shot mean only for SparseGPT 50%, without its dense
    # figure, so there is no degradation to take: the row is left out, not completed.
    frame = table.frame
    assert not ((frame["source"] == DENOISE) & (frame["model"] == "llama-3-8b")
                & (frame["metric"] == "zeroshot_mean")).any()
    assert table.lookup("llama-3-8b", "unstructured@50%",
                        metric="zeroshot_mean").status == "missing"


def test_several_sources_give_the_least_degradation(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\n".join([
        HEADER,
        "m,dense,fp16,dense,wikitext2_ppl,6.0,wikitext2,paper-a,table 1,published",
        "m,2:4,fp16,sparsegpt,wikitext2_ppl,9.0,wikitext2,paper-a,table 1,published",
        "m,dense,fp16,dense,wikitext2_ppl,5.0,wikitext2,paper-b,table 3,published",
        "m,2:4,fp16,wanda,wikitext2_ppl,7.5,wikitext2,paper-b,table 3,published",
    ]) + "\n")
    hit = load_llm_accuracy_table(path).lookup("m", "2:4")
    # paper-a: 9.0 - 6.0 = 3.0; paper-b: 7.5 - 5.0 = 2.5 (less, though from another dense).
    assert (hit.value, hit.degradation, hit.method, hit.source) == (7.5, 2.5, "wanda", "paper-b")


def test_interpolated_rows_say_so(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\n".join([
        HEADER,
        "m,dense,fp16,dense,wikitext2_ppl,6.0,wikitext2,paper-a,table 1,published",
        "m,4:8,fp16,sparsegpt,wikitext2_ppl,8.0,wikitext2,paper-a,"
        "\"between 50% and 2:4 of table 1\",interpolated",
    ]) + "\n")
    assert load_llm_accuracy_table(path).lookup("m", "4:8").status == "interpolated"


def _bad(tmp_path, *rows):
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    with pytest.raises(AccuracyTableError) as info:
        load_llm_accuracy_table(path)
    return str(info.value)


DENSE = "m,dense,fp16,dense,wikitext2_ppl,6.0,wikitext2,paper-a,table 1,published"


@pytest.mark.parametrize(("row", "needle"), [
    ("m,2:4,fp16,sparsegpt,wikitext2_ppl,9.0,wikitext2,paper-b,table 1,published",
     "row 3, column 'source': paper-b has no dense fp16 row for model 'm'"),
    ("m,2:4,int3,gptq,wikitext2_ppl,9.0,wikitext2,paper-a,table 1,published",
     "row 3, column 'weights': 'int3': use fp16, int8, fp8 or int4-gG"),
    ("m,2:4,fp16,sparsegpt,ppl,9.0,wikitext2,paper-a,table 1,published",
     "row 3, column 'metric': 'ppl': use one of wikitext2_ppl, zeroshot_mean, "
     "openllm_v1_mean"),
    ("m,2:4,fp16,sparsegpt,wikitext2_ppl,0.5,wikitext2,paper-a,table 1,published",
     "row 3, column 'value': 0.5: a perplexity is at least 1"),
    ("m,2:4,fp16,sparsegpt,wikitext2_ppl,nan,wikitext2,paper-a,table 1,published",
     "row 3, column 'value'"),
    ("m,2:4,fp16,sparsegpt,wikitext2_ppl,9.0,wikitext2,paper-a,table 1,guessed",
     "row 3, column 'status': 'guessed': use published or interpolated"),
    ("m,unstructured@0.5,fp16,sparsegpt,wikitext2_ppl,9.0,wikitext2,paper-a,t 1,published",
     "write 'unstructured@50%'"),
    ("m,2:4,fp16,sparsegpt,wikitext2_ppl,9.0,wikitext2,paper-a,,published",
     "row 3, column 'location': empty"),
    (DENSE, "rows 2 and 3 both give model 'm', pattern 'dense'"),
])
def test_bad_rows_name_the_file_row_and_column(tmp_path, row, needle):
    message = _bad(tmp_path, DENSE, row)
    assert "bad.csv" in message and needle in message, message
    assert "\n" not in message


def test_one_source_may_give_several_methods_but_one_dense(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("\n".join([
        HEADER, DENSE,
        "m,2:4,fp16,sparsegpt,wikitext2_ppl,9.0,wikitext2,paper-a,table 1,published",
        "m,2:4,fp16,wanda,wikitext2_ppl,8.0,wikitext2,paper-a,table 1,published",
    ]) + "\n")
    hit = load_llm_accuracy_table(path).lookup("m", "2:4")
    assert (hit.value, hit.degradation, hit.method) == (8.0, 2.0, "wanda")
    message = _bad(tmp_path, DENSE,
                   "m,dense,fp16,fp16-eval2,wikitext2_ppl,6.5,wikitext2,paper-a,table 2,"
                   "published")
    assert "row 3, column 'value': paper-a gives two dense fp16 figures for model 'm'" in message


def test_bad_header_and_missing_file(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("model,pattern,value\n")
    with pytest.raises(AccuracyTableError, match="row 1: the header must be"):
        load_llm_accuracy_table(path)
    with pytest.raises(AccuracyTableError, match="cannot read"):
        load_llm_accuracy_table(tmp_path / "absent.csv")


def test_weights_keys():
    assert weights_key(None) == "fp16"
    assert weights_key("int4") == "int4-g128"
    assert weights_key("int4", 64) == "int4-g64"
    assert weights_key("fp8") == "fp8"


def test_shipped_table_is_where_the_docs_say():
    assert LLM_TABLE.name == "accuracy_llm.csv" and LLM_TABLE.exists()
