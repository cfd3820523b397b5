"""Mutation testing of the modules whose numbers the tests must pin down (issue 26): how many
small deliberate bugs ("mutants") a chosen fast test subset catches, per module.

``python -m benchmarks.mutation`` (every module; hours) or ``--module formats --module sol``
(the names in ``MODULES``); ``--max N`` samples N mutants a module (seeded: ``--seed``);
``--at FILE:LINE`` runs only the mutants on that line (a survivor, once a test is written for
it; ``--at FILE:LINE:CHANGE`` only that change); ``--list`` prints the mutants without running
them.

A small AST mutator, not mutmut: mutmut 3 first runs the whole test suite to map tests to
functions (on this project's 2-core machine, an hour, and against its rule of running only the
tests near a change), and its trampolines wrap every function, which numba's ``@njit`` kernels
in ``dse/roofline`` cannot compile. Here each mutant is one change of one AST node: an
arithmetic operator (``+``/``-``, ``*``/``/``, ``//``/``/``, ``**``/``*``, ``%``/``//``), a
comparison (``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``in``/``not in``, ``is``/``is not``),
``and``/``or``, a dropped ``not`` or unary minus, a number (``n`` -> ``n + 1``; a float ``x``
-> ``2x``; ``0.0`` -> ``1.0``), ``True``/``False``. Docstrings, f-strings and ``raise``
statements (messages) are left alone. The mutated module is written into a copy of the
repository (the working tree is never touched, and other people may run tests in it), and the
module's test subset runs there (``pytest -x``); a failing run kills the mutant, and so does
a timed-out one (3x the unmutated subset's time + 10 s) if it times out again against 3x the
unmutated subset timed anew just before (a loaded machine is slow for every run, not only the
mutant's; journal entries of timeouts not so checked run again).

``--journal FILE`` (JSON lines) makes a long run resumable: each mutant's result is appended
as it ends (one line: the module, the mutant's key, killed or not, pytest's last line, the
seconds, and two SHA-256 digests: of the mutated file as it was before the mutation, and of
the test subset it ran: its ids and the contents of their files). A rerun with the same
journal skips every chosen mutant whose entry still matches both digests, runs the others,
and prints the totals of the journal's results and the new ones together. Editing the
mutated file invalidates its entries, which run again; editing the test subset (a test added
to kill a survivor) reruns its survivors, while its kills stand: a test added never revives a
mutant (weaken or remove a test, or edit a module the tests import, and start a new journal:
nothing here notices). A run killed mid-mutant loses only that
mutant; a torn last line is ignored. Kill it (Ctrl-C) and rerun the same command to go on::

    python -m benchmarks.mutation --module roofline --journal roofline.jsonl

Prints, per module: mutants killed / run and the share, then every survivor as
``file:line: change``. A survivor is a missing test, or an equivalent mutant (one no test can
tell apart: say why in the table of ``EQUIVALENT`` below, keyed by the mutated line's text so
that edits elsewhere do not move it; an entry that no longer matches any mutant is printed as
stale, and an entry whose mutant the tests kill, journal kills included, is printed as one to
drop: a test has told it apart).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dse.cli.parser import Parser

ROOT = Path(__file__).resolve().parent.parent

#: name -> (the files mutated, the test subset that must kill their mutants)
MODULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "formats": (("formats/base.py", "formats/block.py", "formats/dense.py",
                 "formats/grammar.py", "formats/masks.py", "formats/nm.py",
                 "formats/sparsity.py", "formats/unstructured.py"),
                ("tests/test_formats.py", "tests/test_golden.py",
                 "tests/test_bound.py::test_read_share_by_hand",
                 "tests/test_bound.py::test_expected_read_shares_by_hand",
                 "tests/test_bound.py::test_expected_read_share_matches_random_masks",
                 "tests/test_measure_run.py::test_masks_are_format_exact",
                 "tests/test_measure_run.py::test_masks_refuse_shapes_the_format_cannot_take",
                 "tests/test_formats_by_hand.py")),
    "roofline": (("dse/roofline/caches.py", "dse/roofline/energy.py",
                  "dse/roofline/evaluator.py", "dse/roofline/kernels.py",
                  "dse/roofline/layer_sums.py", "dse/roofline/memory.py",
                  "dse/roofline/numerics.py", "dse/roofline/pricing.py"),
                 ("tests/test_roofline_mutants.py", "tests/test_reference.py",
                  "tests/test_energy.py", "tests/test_memory.py", "tests/test_layer_sums.py",
                  "tests/test_evaluate_columns_speedup.py")),
    # dse.evaluate's table built from arrays (and the frames' path it falls back to): the
    # fast path against the frozen old one, the columns by hand, and the LLM columns by value.
    "design_columns": (("dse/design_columns.py",),
                       ("tests/test_evaluate_columns_speedup.py", "tests/test_api_parity.py",
                        "tests/test_llm_acceptance.py",
                        # the calibrated tokens/s (expected_tokens_per_s) is pinned here
                        "tests/test_llm_expected.py")),
    "sol": (("dse/measure/sol.py",),
            ("tests/test_bound.py::test_a_warm_row_is_bounded_by_the_caches_and_a_cold_one_by_dram",
             "tests/test_bound.py::test_a_depthwise_row_is_bounded_with_all_its_groups",
             "tests/test_bound.py::test_shipped_bounds_are_what_the_code_computes",
             "tests/test_bound.py::test_no_shipped_kernel_row_beats_its_bound",
             "tests/test_sol_by_hand.py")),
    "expected": (("dse/calibrate/expected.py",),
                 ("tests/test_calibrate.py", "tests/test_norm_width.py",
                  "tests/test_warm_capacity.py", "tests/test_calibrate_mutants.py",
                  # the dtypes never timed, a convolution as it runs, MoE experts touched,
                  # the vector kinds' own predictors: expected.py's other callers' tests
                  "tests/test_coverage_dtype.py", "tests/test_expected_runs_as.py",
                  "tests/test_llm_moe_touched.py", "tests/test_llm_calibrated.py",
                  "tests/test_vector_keys.py")),
    "features": (("dse/calibrate/features.py",),
                 ("tests/test_calibrate.py", "tests/test_norm_width.py",
                  "tests/test_calibrate_mutants.py", "tests/test_conv_tiles.py",
                  # row balance drawn from random masks, the convolution's window and
                  # channel alignment: features.py's own tests kept beside their issue's
                  "tests/test_calibrate_nested.py", "tests/test_conv_window.py")),
    "llm": (("workloads/llm.py",), ("tests/test_llm_trace.py", "tests/test_llm_mutants.py")),
}

#: Survivors examined and found equivalent, keyed by what stays put when lines move: (file, the
#: mutated line's stripped source text, change; with " #N" where the file has several mutants
#: of that text and change) -> why no test can kill it. A run prints a survivor's key to paste
#: here, and an entry that matches no mutant (its line was edited) as stale.
#: Reasons shared by the survivors of dse/design_columns.py's fast path.
_SAME_TABLE = ("a path choice (the direct frame, the fast table, a cache's size): the same table "
               "either way, only sooner or later; the tests check the table, the benchmarks "
               "its speed")
_PROBE = ("a value of the self-check's probe: the direct frame equals pd.DataFrame on the "
          "changed probe too, so the check passes as before")
_CHECK = ("the self-check made weaker: on this pandas the direct frame is pandas' own, so it "
          "passes either way (it guards other pandas versions)")
_MASKED = "the value under a masked entry (capacity unknown): NA whatever it holds"

#: dse/roofline/layer_sums._summing_checked: other probe data that the fast sums and
#: groupby still sum to the same bits (the check passes on it too, and the fast sums are
#: pinned by test_group_sums_by_hand).
_SUM_PROBE = ("other probe data in the self-check, which the fast sums still pass: the "
              "same path serves, with the same sums")

#: Reasons that several survivors share.
_CACHE_SIZE = ("a cache one entry larger: the same values, computed again one call later or "
               "sooner")
_DIGITS = "any number of 18 or more digits is out of range"
_DIVIDE_BY_ONES = "dividing by an array of ones broadcasts as multiplying by it"
_NO_DISK_CACHE = ("cache=False: the same kernel, compiled in every process (slower, same "
                  "numbers)")
_OBSERVED = "observed= acts only on categorical groupers; no dataset column is categorical"
_ONE_ARRAY = "np.concatenate of one array is that array"
_PER_OP_PATH = ("per_op's work only picks numpy, serial or parallel, which give the same bits "
                "(test_per_op_kernels_by_hand)")
_TOTALS_PATH = ("design_totals' work only picks the parallel or serial kernel, which give the "
                "same bits")

EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("dse/measure/sol.py", 'trace = workloads.Trace.from_records("measured", [1], records)',
     "1 -> 2"):
        "the one-op trace's input_shape: nothing is priced from it, and its ops are all "
        "convolutions, which no trace check holds to the model input's size",
    ("dse/measure/sol.py", "for row in layers.itertuples(index=False)}", "False -> True"):
        "itertuples(index=True) adds an Index field; the fields are read by name",
    ("dse/measure/sol.py",
     "for i, (row, note) in enumerate(zip(frame.itertuples(index=False), notes, strict=True)):",
     "False -> True"):
        "itertuples(index=True) adds an Index field; the fields are read by name",
    ("dse/measure/sol.py",
     "for i, (row, note) in enumerate(zip(frame.itertuples(index=False), notes, strict=True)):",
     "True -> False"):
        "zip(strict=False): the notes are built from the same frame, always as long",
    # _whole caps numbers of over 18 digits (leading zeros dropped) at 10**18: every field's
    # limit (M <= 2**16, blocks <= 64) is far below 10**17, so the cap's exact place and value
    # refuse the same inputs, with the same message (which quotes the digits as typed).
    ("formats/grammar.py", "return int(digits) if len(digits) <= 18 else 10**18", "<= -> <"):
        _DIGITS,
    ("formats/grammar.py", "return int(digits) if len(digits) <= 18 else 10**18", "18 -> 19 #1"):
        _DIGITS,
    ("formats/grammar.py", "return int(digits) if len(digits) <= 18 else 10**18", "18 -> 19 #2"):
        _DIGITS,
    ("formats/grammar.py", "return int(digits) if len(digits) <= 18 else 10**18", "10 -> 11"):
        "11**18 is out of range as 10**18 is",
    ("formats/masks.py",
     "for name, keep in zip(names, _threshold_keep(scores, fmt.sparsity), strict=True):",
     "True -> False"):
        "zip(strict=False): the names and their masks come from the same list",
    ("formats/masks.py",
     "for name, keep in zip(names, _layerwise_keep(norms, fmt.sparsity), strict=True):",
     "True -> False"):
        "zip(strict=False): _layerwise_keep returns one mask per score, in the names' order",
    ("formats/masks.py", "for score, count in zip(scores, counts, strict=True):",
     "True -> False"):
        "zip(strict=False): counts is built with one entry per score",
    ("formats/masks.py", "if n_keep > 0:", "> -> >="):
        "at n_keep = 0 the guarded line keeps argsort(...)[:0], nothing, as skipping it does",
    # kept_share's closed branch: q >= 1 is 1.0 whatever the clip's top or the inner value.
    ("formats/base.py",
     "q = np.clip(np.asarray(keep_probability, dtype=np.float64), 0.0, 1.0)", "1.0 -> 2.0"):
        "a q clipped to at most 2.0 instead of 1.0 is >= 1 either way, and q >= 1 gives 1.0",
    # The unit codes are compared only as Unit members (dse/roofline/pricing.py); no kernel
    # or file holds the number 2.
    ("formats/base.py", "VECTOR = 2  #: vector (CUDA) cores: unstructured CSR", "2 -> 3"):
        "the codes are used only through the Unit members, and 3 is still distinct",
    # x * np.ones(shape) broadcasts x to the shape; x / np.ones(shape) is the same array.
    ("formats/block.py",
     "return kept_share(d, np.divide(m, self.block)) * np.ones(np.broadcast(m, k).shape)",
     "* -> /"):
        _DIVIDE_BY_ONES,
    ("formats/nm.py",
     "return kept_share(self.n / self.m, m) * np.ones(np.broadcast(m, k).shape)", "* -> /"):
        _DIVIDE_BY_ONES,
    ("formats/unstructured.py",
     "return kept_share(d, m) * np.ones(np.broadcast(m, k).shape)", "* -> /"):
        _DIVIDE_BY_ONES,
    # dse/calibrate/expected.py, its full run of 2026-11-27
    ("dse/calibrate/expected.py", "strict=True)]", "True -> False #2"):
        "zip(strict=False): the op names, kinds and input flags are columns of one frame",
    ("dse/calibrate/expected.py",
     'block = np.array([int(getattr(f, "block", 0) or getattr(f, "m", 0) or 0) for f in parsed],',
     "0 -> 1 #2"):
        "a format with neither block nor m is dense or unstructured, whose block the next "
        "np.where sets (0 and 1)",
    ("dse/calibrate/expected.py",
     'block = np.array([int(getattr(f, "block", 0) or getattr(f, "m", 0) or 0) for f in parsed],',
     "0 -> 1 #3"):
        "a format with neither block nor m is dense or unstructured, whose block the next "
        "np.where sets (0 and 1)",
    ("dse/calibrate/expected.py", "x = np.array(x, dtype=float, copy=True)", "True -> False"):
        "the caller passes x[rows], a fresh array of fancy indexing, and reads x no more",
    ("dse/calibrate/expected.py", "@functools.lru_cache(maxsize=8)", "8 -> 9"):
        "a cache one entry larger: the same dtype, read again one call later or sooner",
    ("dse/calibrate/expected.py",
     'for n in names], ignore_index=True)["dtype"].astype(str)', "True -> False"):
        "the index of the concatenated dtypes is never read: mode() counts values",
    # dse/calibrate/features.py: tile is a whole number >= 1 (check_predictor_document), shapes
    # are whole numbers, and a dataset's columns are strings and numbers (dataset.SCHEMA).
    ("dse/calibrate/features.py", "rows = np.where(gemm, m, 1.0)", "1.0 -> 2.0"):
        "a non-GEMM row's rows is read only where np.where(gemm, ...) takes the other side",
    ("dse/calibrate/features.py",
     "tiles_n = np.ceil(np.maximum(n, 1.0) / (tile if tile > 1 else 1))", "> -> >="):
        "at tile 1, tile and 1 are the same divisor",
    ("dse/calibrate/features.py",
     "tiles = np.where(gemm, groups * tiles_m * tiles_n, np.ceil(np.maximum(n, 1.0) / 4096))",
     "1.0 -> 2.0"):
        "a vector op of 0 or 1 output elements is ceil(n / 4096) = 1 block either way",
    ("dse/calibrate/features.py",
     "pad_eff = np.where(gemm, (rows * n) / (tiles_m * tile * tiles_n * tile), 1.0)",
     "1.0 -> 2.0"):
        "a non-GEMM row's pad_eff of 2.0 is clipped to 1.0 (np.clip in the column stack)",
    ("dse/calibrate/features.py",
     "np.clip(pad_eff, 0.0, 1.0), kinds, impl, warm, np.log1p(per_out), np.log1p(window),",
     "1.0 -> 2.0"):
        "pad_eff <= 1 already: whole tiles of tile >= 1 cover the rows x n outputs",
    ("dse/calibrate/features.py",
     'rows["family"], rows["kind"], rows["groups"], rows["block"], strict=True)]',
     "True -> False"):
        "zip(strict=False): four columns of one frame, always as long",
    ("dse/calibrate/features.py",
     'rounds = rows.groupby(kernel + ["run_id", "round"], as_index=False, observed=True).agg(',
     "True -> False"):
        _OBSERVED,
    ("dse/calibrate/features.py",
     'runs = rounds.groupby(kernel + ["run_id"], as_index=False, observed=True).agg(',
     "True -> False"):
        _OBSERVED,
    ("dse/calibrate/features.py", "out = runs.groupby(kernel, as_index=False, observed=True).agg(",
     "True -> False"):
        _OBSERVED,
    ("dse/calibrate/features.py",
     'runs = rounds.groupby(kernel + ["run_id"], as_index=False, observed=True).agg(',
     "False -> True"):
        "as_index=True: the next groupby finds the same names as index levels",
    # _conv_geometry guards its divisions with np.where(known, x, 1.0); the outer
    # np.where(known, ..., 0.0) discards every row the guard's 1.0 divides.
    ("dse/calibrate/features.py",
     "per_out = np.where(known, inputs / np.where(known, n, 1.0), 0.0)", "1.0 -> 2.0"):
        "the guard's divisor is used only for rows the outer np.where sets to 0",
    ("dse/calibrate/features.py",
     "window = np.where(known, window_k / np.where(known, per_out, 1.0), 0.0)", "1.0 -> 2.0"):
        "the guard's divisor is used only for rows the outer np.where sets to 0",
    ("dse/calibrate/features.py",
     'conv = rows["kind"].astype(str).isin(_CONV_KINDS) & (rows["m"] > 0)', "> -> >="):
        "a conv row of m 0 (no output channel: traces refuse it, a dataset may hold it) gets "
        "its input size, kernel and stride read from its note instead of 0, but no feature "
        "reads them: every geometry feature needs a GEMM (m > 0), so predictions are the same",
    ("dse/calibrate/features.py", 'out["impl"] = 0', "0 -> 1"):
        "every row's impl is written again by the loop below (every row has a key)",
    # row_balance: a sparsity is in [0, 1) in every frame it sees: a dataset refuses others on
    # load (dse/measure/dataset.py) and the format grammar refuses 100% (formats/grammar.py)
    ("dse/calibrate/features.py",
     'density = 1.0 - np.clip(np.nan_to_num(frame["sparsity"].to_numpy(dtype=float)), 0.0, 1.0)',
     "1.0 -> 2.0 #2"):
        "the clip's top: a sparsity above 1 never reaches it (refused on load and by the grammar)",
    ("dse/calibrate/features.py", "sparse &= (m > 0) & (density > 0)", "> -> >= #2"):
        "density 0 is a sparsity of 1, refused on load and by the grammar: density > 0 and >= 0 "
        "pick the same rows",
    ("dse/calibrate/features.py",
     "fits = (area > 0) & np.isclose(np.mod(k, np.where(area > 0, area, 1.0)), 0.0)", "> -> >= #1"):
        "area 0 (no window recorded) then fits, and its input channels are k / 1 = k: what the "
        "branch for a window that does not fit gives",
    ("dse/calibrate/features.py", "@functools.lru_cache(maxsize=4096)", "4096 -> 4097"):
        "a cache's size: the same planes, computed again one call sooner or later",
    ("dse/calibrate/features.py",
     "fits = (area > 0) & np.isclose(np.mod(k, np.where(area > 0, area, 1.0)), 0.0)",
     "0 -> 1 #1"):
        "area > 1 instead of > 0: a 1 x 1 window (area 1) then does not fit, and its input "
        "channels are k itself, as k / 1 when it fits",
    ("dse/calibrate/features.py",
     "fits = (area > 0) & np.isclose(np.mod(k, np.where(area > 0, area, 1.0)), 0.0)",
     "0 -> 1 #2"):
        "the divisor np.where(area > 1, area, 1.0): a 1 x 1 window's area is 1.0 either way",
    ("dse/calibrate/features.py",
     "fits = (area > 0) & np.isclose(np.mod(k, np.where(area > 0, area, 1.0)), 0.0)",
     "1.0 -> 2.0"):
        "the divisor for area 0, whose row the outer (area > 0) has already ruled out",
    ("dse/calibrate/features.py",
     "cin = np.where(fits, k / np.where(area > 0, area, 1.0), k)",
     "1.0 -> 2.0"):
        "the divisor for area 0: such a row does not fit (area > 0 above), so np.where takes k",
    ("dse/calibrate/features.py",
     "cin = np.where(fits, k / np.where(area > 0, area, 1.0), k)",
     "0 -> 1"):
        "area > 1: a 1 x 1 window divides by 1.0 instead of its area 1, the same k",
    ("dse/calibrate/features.py",
     "out.append(np.where(conv & (values > 0), values, 0.0))",
     "> -> >="):
        "at a window of 0 both branches give 0",
    ("dse/calibrate/features.py",
     'last = _OP_SUFFIX.sub("", str(name).rsplit(".", 1)[-1])',
     "1 -> 2 #1"):
        "rsplit's maxsplit 2 instead of 1: the last part, [-1], is the same",
    ("dse/calibrate/features.py",
     'if kind == "elementwise" and str(name).rsplit(".", 1)[-1] in _STRIDED_NAMES:',
     "1 -> 2 #1"):
        "rsplit's maxsplit 2 instead of 1: the last part, [-1], is the same",
    ("dse/calibrate/features.py", "strict=True)]", "True -> False"):
        "zip(strict=False): the input shapes and the notes' windows of the same rows, as long",
    ("dse/calibrate/expected.py", "strict=True)]", "True -> False #1"):
        "zip(strict=False): three columns of one frame, always as long",
    ("dse/calibrate/expected.py", 'gemm = (m > 0) & np.isin(op["kind"].to_numpy(), _GEMM_KINDS)',
     "> -> >="):
        "a trace's GEMM-kind op has m >= 1 (workloads.trace refuses m 0), the others are not GEMMs",
    ("dse/calibrate/expected.py",
     "codes = out.groupby(kernel, sort=False, observed=True).ngroup().to_numpy()",
     "False -> True"):
        "ngroup(sort=True) numbers the kernels otherwise, and keys[] is indexed by the same codes",
    ("dse/calibrate/expected.py",
     "codes = out.groupby(kernel, sort=False, observed=True).ngroup().to_numpy()",
     "True -> False"):
        "observed= acts only on categorical groupers; these columns are built from arrays",
    # max(b, 1) -> max(b, 2) (the other 1 -> 2 there, max(s, 1), is killed): b >= 1 and every
    # size s that is not b is >= 2 when b is 1, so the nearest is the smallest size either way.
    ("dse/calibrate/expected.py",
     "near = min(sizes, key=lambda s: (abs(np.log2(max(s, 1) / max(b, 1))), s))",
     "1 -> 2 #2"):
        "max(b, 2): for block1 every measured size is >= 2; the nearest is the smallest still",
    ("dse/calibrate/expected.py", "notes[other] = joined[inverse.reshape(-1)]", "1 -> 2"):
        "reshape(-2): numpy takes any negative size as the one unknown dimension",
    ("dse/calibrate/expected.py",
     'out["fraction_of_sol"] = np.where(expected > 0, out["time_s"] / expected, np.nan)',
     "> -> >="):
        "expected_s is 0 only for an op without work, whose time_s 0 / 0 is NaN as well",
    ("dse/calibrate/expected.py",
     'share = used.groupby("predictor")["expected_s"].sum() / max(used["expected_s"].sum(), 1e-30)',  # noqa: E501
     "1e-30 -> 2e-30"):
        "the floor acts only when no op has expected time, when there are no shares to divide",
    ("dse/calibrate/expected.py",
     '"validated_rmspe": float(np.average(rmspe.fillna(0.0), weights=weights))',
     "0.0 -> 1.0"):
        "an RMSPE filled in for a bound row has weight 0 in np.average",
    ("dse/calibrate/expected.py",
     'per = layers.groupby(keys, sort=False)[["expected_s", "predictor", "validated_rmspe",',
     "False -> True"):
        "groupby(sort=True) reorders the summaries; the merge on keys puts them back",
    ("dse/calibrate/expected.py",
     'per["hardware"], per["batch"], per["expected_latency_s"], strict=True)]',
     "True -> False"):
        "zip(strict=False): three columns of one frame, always as long",
    # workloads/llm.py
    ("workloads/llm.py",
     "h, hd, g = c.hidden_size, c.head_dim, c.num_heads // c.num_kv_heads", "// -> /"):
        "heads is a multiple of kv_heads (llm_config_from_dict refuses others), so g is a "
        "whole float, and Trace.from_records turns whole floats into ints",
    ("workloads/llm.py", "mid = (lo + hi + 1) // 2", "1 -> 2"):
        "(lo + hi + 2) // 2 lies in (lo, hi] too while lo < hi: the search ends on the same "
        "longest prompt",
    ("workloads/llm.py",
     "lo, hi = 1, context - 1  # the longest context whose every count a trace holds",
     "- -> +"):
        "every count grows with the context and context itself is too large, so context and "
        "context + 1 are too; the search for the longest that fits ends on the same prompt, "
        "after one more probe",
    ("workloads/llm.py", 't = context if phase == "prefill" else 1', "1 -> 2 #1"):
        "t is the decode's embedding lookup alone: its 2 x (1 + hidden) elements stay far "
        "below MAX_PER_SAMPLE (hidden <= 2**22), and the lookup adds no weights or FLOPs to "
        "the totals",
    ("workloads/llm.py", "groups = [(1, [_embedding(config, t)])]", "1 -> 2"):
        "the count weighs only the totals, and the embedding lookup adds 0 weight elements, "
        "0 vector FLOPs and 0 dense FLOPs to them",
    ("workloads/llm.py", 'totals = {"weight_elems": 0, "vector_flops": 0, "flops": 0}',
     "0 -> 1 #2"):
        "the vector FLOPs total never nears 2**53: once every op fits, each op's vector FLOPs "
        "are at most 8 (gelu) x its <= 2**29 elements, and 1,024 layers of <= 20 ops plus the "
        "final norm hold under 2**15 x 2**32 = 2**47",
    # dse/roofline (issue 26, a seeded sample of 150 of its mutants)
    ("dse/roofline/evaluator.py", "categorical: bool = False) -> pd.DataFrame:",
     "False -> True"):
        "_totals_frame's default is never used: its one caller, evaluate, passes categorical",
    ("dse/roofline/evaluator.py", "@dataclass(frozen=True, eq=False)", "False -> True #1"):
        "_GridLabels are cached as dict values, never compared nor hashed",
    ("dse/roofline/evaluator.py", "@dataclass(frozen=True, eq=False)", "False -> True #2"):
        "LayerArrays are returned and read field by field, never compared nor hashed",
    ("dse/roofline/evaluator.py", "for fusion, grid in zip(fusions, labels, strict=True):",
     "True -> False"):
        "zip(strict=False): _grid_labels builds one entry per fusion of the same list",
    ("dse/roofline/kernels.py",
     "kernel = _per_op_parallel if work >= PARALLEL_MIN_OP_EVALS else _per_op_serial",
     ">= -> >"):
        "the parallel and serial per-op kernels give the same bits "
        "(test_parallel_and_serial_kernels_agree): only which runs at exactly 200,000",
    ("dse/roofline/memory.py", "@lru_cache(maxsize=256)", "256 -> 257 #1"):
        _CACHE_SIZE,
    ("dse/roofline/memory.py", "@lru_cache(maxsize=256)", "256 -> 257 #2"):
        _CACHE_SIZE,
    ("dse/roofline/memory.py", "room = np.where(known, capacity - weights, 0.0)", "0.0 -> 1.0"):
        "room is used only where the capacity is known; the other rows' largest batch is NA",
    ("dse/roofline/memory.py", "dram, onchip = np.zeros(n + 1), np.zeros(n + 1)", "1 -> 2 #1"):
        "one more slot of the live-set differences, past the last op: the peak reads [:n] only",
    ("dse/roofline/pricing.py",
     'bias_bytes = np.where(prunable, vb * (_as_float(ops, "weight_elems") - gw * m * k), 0.0)',
     "0.0 -> 1.0"):
        "a non-prunable op's bias_bytes is read only where the op takes the format (takes "
        "implies prunable); elsewhere the dense weight bytes are used",
    ("dse/roofline/pricing.py",
     "dense = (np.where(needs, dense_flops, own[0]), np.where(needs, zeros, own[1]),",
     "1 -> 2"):
        "where no op needs the format's kernel it runs dense on the tensor cores: its own "
        "sparse-core and CSR FLOPs (own[1], own[2]) are both 0 there",
    ("dse/roofline/pricing.py",
     "return sum(x for x, k in zip(sizes, kept, strict=True) if not k) / produced",
     "True -> False"):
        "zip(strict=False): rule_edges builds kept from the same producers as sizes",
    ("dse/roofline/pricing.py", "routed_op = sets > 0", "0 -> 1"):
        "an MoE layer of one expert (k <= E = 1, T >= 1 tokens a step) is read whole: "
        "1 - (1 - 1/1)^T = 1, as an unrouted op",
    ("dse/roofline/pricing.py", "@lru_cache(maxsize=64)", "64 -> 65 #4"):
        _CACHE_SIZE,
    # numba's on-disk cache saves the compile in the next process; the compiled code is the same
    # (not the serial totals kernel, whose cache file the first-run note looks for, nor
    # _accumulate, cached with it: test_the_first_runs_kernels_are_cached_where_the_note_looks)
    ("dse/roofline/kernels.py", "@_jit(cache=True, parallel=True)", "True -> False #1"):
        _NO_DISK_CACHE,
    # dse/roofline, the full run (2026-11-26): caches, read-only copies, frozen flags no caller
    # observes, and which of two paths that give the same rows builds a grid.
    ("dse/roofline/energy.py", "@lru_cache(maxsize=64)", "64 -> 65"):
        _CACHE_SIZE,
    ("dse/roofline/evaluator.py", "@lru_cache(maxsize=64)", "64 -> 65"):
        _CACHE_SIZE,
    ("dse/roofline/evaluator.py", "@lru_cache(maxsize=4096)", "4096 -> 4097"):
        _CACHE_SIZE,
    ("dse/roofline/evaluator.py", "@lru_cache(maxsize=1024)", "1024 -> 1025 #2"):
        _CACHE_SIZE,
    ("dse/roofline/evaluator.py", "_GRID_LABELS_MAX = 256", "256 -> 257"):
        "a cache one entry larger: the same labels, built again one call later or sooner",
    ("dse/roofline/evaluator.py", "if len(_GRID_LABELS) >= _GRID_LABELS_MAX:", ">= -> >"):
        "the label cache cleared at one entry more: the same labels, built again later",
    ("dse/roofline/energy.py", "figures = {c: ops[c].to_numpy(dtype=np.float64, copy=True)",
     "True -> False"):
        "copy=False: the float64 columns (density, vector_flops) become read-only views of "
        "trace.ops, not copies (the int columns are converted, so copied either way); nothing "
        "writes them or edits a trace's ops in place (its prices are all cached per trace)",
    ("dse/roofline/energy.py",
     'figures.update(prunable=ops["prunable"].to_numpy(dtype=bool, copy=True),',
     "True -> False"):
        "copy=False: a read-only view of trace.ops' bool column, not a copy; nothing writes it "
        "or edits a trace's ops in place (its prices are all cached per trace)",
    ("dse/roofline/energy.py",
     'scales = np.where(per_op["gemm_weights"][j], gw * numerics.scale_bytes(m, k), 0.0)',
     "0.0 -> 1.0"):
        "a prunable op is a linear or conv of weight_elems >= groups*m*k >= 1 (workloads.trace "
        "refuses others), so it has GEMM weights: the 1.0 is read only by rows the format's "
        "values do not take (rows = own & prunable)",
    ("dse/roofline/evaluator.py", "SMALL_GRID_DESIGNS = 64", "64 -> 65"):
        "evaluate_designs' small-grid and general paths both give evaluate's rows "
        "(test_a_grid_past_the_small_grid_path_gives_evaluates_rows and the small-grid tests "
        "of test_roofline_mutants): the threshold only picks which builds 65 designs",
    ("dse/roofline/evaluator.py",
     "if len(problem.accelerators) * len(problem.formats) * len(problem.batches) \\",
     "<= -> <"):
        "evaluate_designs' small-grid and general paths both give evaluate's rows: the test "
        "only picks which builds a grid of exactly 64 designs",
    ("dse/roofline/evaluator.py",
     "if len(problem.accelerators) * len(problem.formats) * len(problem.batches) \\",
     "* -> / #1"):
        "evaluate_designs' small-grid and general paths both give evaluate's rows: the product "
        "only picks which builds the grid",
    ("dse/roofline/evaluator.py", "categorical: bool = False) -> list[dict[str, object]]:",
     "False -> True"):
        "the default is taken only by evaluate_designs' general path, which passes every column "
        "through _as_arrays: np.full of a Categorical is the object array of its strings, as "
        "the plain labels are (test_a_grid_past_the_small_grid_path_gives_evaluates_rows)",
    ("dse/roofline/evaluator.py", "@dataclass(frozen=True)", "True -> False #1"):
        "a Problem is built afresh by every prepare call, never cached nor shared; nothing "
        "assigns its fields, and hashing it fails either way (its ndarray fields)",
    ("dse/roofline/evaluator.py", "@dataclass(frozen=True)", "True -> False #4"):
        "a Designs is built afresh by every evaluate_designs call, never cached nor shared; "
        "nothing assigns its field, and hashing it fails either way (a dict)",
    ("dse/roofline/evaluator.py", "@dataclass(frozen=True, eq=False)", "True -> False #1"):
        "_GridLabels are cached dict values, but nothing assigns their fields (each call copies "
        "its groups), and eq=False hashes by identity either way",
    ("dse/roofline/evaluator.py", "@dataclass(frozen=True, eq=False)", "True -> False #2"):
        "a LayerArrays is built afresh by every layer_arrays call and read field by field; "
        "nothing assigns its fields, and eq=False hashes by identity either way",
    ("dse/roofline/evaluator.py", "sparse_unit = a.sparse_flops[k, f, j] > 0", "0 -> 1"):
        "only N:M runs on the sparse tensor core: 2 x groups x (N/M) x m x k x n useful FLOPs "
        "a sample, k a multiple of M and every factor >= 1, so at least 2; > 0 and > 1 agree",
    ("dse/roofline/evaluator.py", "row = [0.0] * K.HW_COLUMNS", "0.0 -> 1.0"):
        "every one of the HW_COLUMNS (5) slots is assigned on the next five lines",
    ("dse/roofline/evaluator.py",
     "if len(problem.accelerators) * len(problem.formats) * len(problem.batches) \\",
     "* -> / #2"):
        "evaluate_designs' small-grid and general paths both give evaluate's rows: the product "
        "only picks which builds the grid",
    ("dse/roofline/evaluator.py", "**_design_labels(problem, h, f, problem.batches[b], False),",
     "False -> True"):
        "categorical labels in _grid_labels: np.stack turns each Categorical into the object "
        "array of its strings, the plain labels' arrays",
    ("dse/roofline/evaluator.py", "False)", "False -> True"):
        "a categorical hw_fallback in _grid_labels: np.stack turns it into the object array "
        "of its strings, the plain label's array",
    ("dse/roofline/evaluator.py",
     "for group, names in zip(grid.groups, grid.names, strict=True):", "True -> False"):
        "zip(strict=False): _grid_labels builds groups and names together, one per dtype",
    ("dse/roofline/evaluator.py",
     "return Designs({k: np.concatenate([p[k] for p in parts]) for k in parts[0]})", "0 -> 1"):
        "parts[1]'s names: every part has the same columns, and here there are 2 or more parts",
    ("dse/roofline/evaluator.py", "g.setflags(write=False)  # copied for each call's result",
     "False -> True"):
        "the cached label groups never leave _small_grid_columns, which hands out copies "
        "(group.copy()); nothing writes the groups themselves",
    ("dse/roofline/evaluator.py", "chosen = totals[key][:, 0]", "0 -> 1"):
        "with no design falling back every design runs its own kernel, and the kernels copy "
        "its price into slot 1 too (kernels._one_design, _design_totals_numpy)",
    ("dse/roofline/evaluator.py",
     "for whole, piece in zip((compute, mem, mem_fused, fl, wb), part, strict=True):",
     "True -> False"):
        "zip(strict=False): five arrays and per_op's five results, always as many",
    ("dse/roofline/kernels.py", "HW_COLUMNS = 5", "5 -> 6"):
        "one more column of zeros in each hardware row: the kernels read theirs by HW_INV_*",
    ("dse/roofline/kernels.py", "PARALLEL_MIN_OP_EVALS = 200_000", "200000 -> 200001"):
        "the parallel and serial kernels give the same bits "
        "(test_parallel_and_serial_kernels_agree): only which runs at exactly 200,000",
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "* -> / #1"):
        _TOTALS_PATH,
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "* -> / #4"):
        _PER_OP_PATH,
    # dse/roofline, the full run's later survivors (2026-11-27, helper 53): compile flags, which
    # of two paths that give the same numbers runs, caches, the self-check's probe data.
    ("dse/roofline/kernels.py", "@_jit(cache=True, parallel=True)", "True -> False #2"):
        "parallel=False: prange runs as range and each design's slot is written by its own "
        "iteration alone, so the same numbers on one thread",
    ("dse/roofline/kernels.py", "@_jit(cache=True, parallel=True)", "True -> False #4"):
        "parallel=False: prange runs as range and each design's slot is written by its own "
        "iteration alone, so the same numbers on one thread",
    ("dse/roofline/kernels.py", "@_jit(cache=True)", "True -> False #2"):
        _NO_DISK_CACHE,
    ("dse/roofline/kernels.py", "@_jit(cache=True, parallel=True)", "True -> False #3"):
        _NO_DISK_CACHE,
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "* -> / #2"): _TOTALS_PATH,
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "* -> / #3"): _TOTALS_PATH,
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "0 -> 1 #1"): "design_totals' work (another axis's length) only picks the parallel or "
                   "serial kernel, which give the same bits",
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "1 -> 2 #1"): "design_totals' work (another axis's length) only picks the parallel or "
                   "serial kernel, which give the same bits",
    ("dse/roofline/kernels.py",
     "kernel = _design_totals_parallel if work >= PARALLEL_MIN_OP_EVALS else _design_totals_serial",
     ">= -> >"): "the parallel and serial kernels give the same bits "
                 "(test_parallel_and_serial_kernels_agree): only which runs at exactly 200,000",
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "* -> / #5"): _PER_OP_PATH,
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "* -> / #6"): _PER_OP_PATH,
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "0 -> 1 #3"): "per_op's work (another axis's length) only picks numpy, serial or "
                   "parallel, which give the same bits (test_per_op_kernels_by_hand)",
    ("dse/roofline/kernels.py",
     "work = hw.shape[0] * tensor_flops.shape[1] * batches.shape[0] * tensor_flops.shape[2]",
     "1 -> 2 #2"): "per_op's work (another axis's length) only picks numpy, serial or "
                   "parallel, which give the same bits (test_per_op_kernels_by_hand)",
    ("dse/roofline/kernels.py", "if work < NUMPY_MAX_OP_EVALS or _NUMPY_ONLY.get():", "< -> <="):
        "per_op's numpy and compiled paths give the same bits (test_per_op_kernels_by_hand): "
        "only which runs at exactly 20,000 op-evaluations",
    ("dse/roofline/layer_sums.py", "bound = 1  # codes < bound", "1 -> 2"):
        "bound only decides when the codes are renumbered (pd.factorize: one-to-one), never "
        "which rows share a code",
    ("dse/roofline/layer_sums.py",
     "if bound * max(size, 1) >= 2**62:  # renumbered, so that the numbers stay below rows**2",
     "** -> *"): "renumbering (pd.factorize, one-to-one) at every key instead of near 2**62: "
                 "the same rows share a code",
    ("dse/roofline/layer_sums.py",
     "if bound * max(size, 1) >= 2**62:  # renumbered, so that the numbers stay below rows**2",
     "1 -> 2"): "max(size, 2) only decides when the codes are renumbered (one-to-one)",
    ("dse/roofline/layer_sums.py",
     "if bound * max(size, 1) >= 2**62:  # renumbered, so that the numbers stay below rows**2",
     "62 -> 63"): "below 2**63 the codes (< bound * size) still fit in int64: no overflow, the "
                  "same rows share a code",
    ("dse/roofline/layer_sums.py",
     "if bound * max(size, 1) >= 2**62:  # renumbered, so that the numbers stay below rows**2",
     ">= -> >"): "at bound * size == 2**62 exactly the codes (< 2**62) fit in int64 unrenumbered",
    ("dse/roofline/layer_sums.py", "codes = codes * size + np.maximum(labels, 0)", "+ -> -"):
        "c * size - l with 0 <= l < size is one-to-one too (it lies in ((c-1)*size, c*size]): "
        "the same rows share a code",
    ("dse/roofline/layer_sums.py", "bound *= max(size, 1)", "1 -> 2"):
        "bound only decides when the codes are renumbered (one-to-one)",
    ("dse/roofline/layer_sums.py",
     "sums = pd.DataFrame(values, copy=False).groupby(codes, sort=False).sum()",
     "False -> True #1"): "copy=True: the frame sums a copy of the same values",
    ("dse/roofline/layer_sums.py",
     "sums = pd.DataFrame(values, copy=False).groupby(labels, sort=False).sum()",
     "False -> True #1"): "copy=True: the frame sums a copy of the same values",
    ("dse/roofline/layer_sums.py", "out = frame.copy(deep=False)  # copy on write: setting a "
     "column leaves ``frame`` as it is", "False -> True"):
        "a deep copy holds the same values; under copy on write the shallow one already "
        "leaves frame as it is",
    ("dse/roofline/layer_sums.py", "ok = ok and mine.tobytes() == theirs.tobytes()", "and -> or"):
        "the check always passes: in the pandas installed it passes anyway "
        "(test_the_fast_group_sums_serve_in_the_installed_pandas), and the fast sums are right "
        "(test_group_sums_by_hand)",
    ("dse/roofline/layer_sums.py", "ok = False", "False -> True"):
        "reached only when a probe raises, which no probe does in the pandas installed",
    ("dse/roofline/memory.py", "dram, onchip = np.zeros(n + 1), np.zeros(n + 1)", "1 -> 2 #2"):
        "one more slot of the live-set differences, past the last op: the peak reads [:n] only",
    ("dse/roofline/memory.py",
     '"fits": pd.arrays.BooleanArray(np.where(known, peak <= capacity, False), ~known),',
     "False -> True"): "the value under a masked entry (capacity unknown): NA whatever it holds",
    ("dse/roofline/pricing.py", "@lru_cache(maxsize=64)", "64 -> 65 #1"):
        _CACHE_SIZE,
    ("dse/roofline/pricing.py", "@lru_cache(maxsize=64)", "64 -> 65 #2"):
        _CACHE_SIZE,
    ("dse/roofline/pricing.py", "@lru_cache(maxsize=64)", "64 -> 65 #3"):
        _CACHE_SIZE,
    ("dse/roofline/pricing.py",
     "scales = np.where(has_gemm_weights(ops), gw * numerics.scale_bytes(m, k), 0.0)",
     "0.0 -> 1.0"): "scales are read only where the format takes the op (takes implies "
                    "prunable), and a prunable op is a conv or linear with weight_elems >= "
                    "groups*m*k >= 1 (Trace validation): has_gemm_weights is true there",
    ("dse/roofline/pricing.py",
     "csr = (np.where(needs, zeros, own[0]), np.where(needs, zeros, own[1]),", "1 -> 2"):
        "where no op needs the format's kernel it runs dense on the tensor cores: its own "
        "sparse-core and CSR FLOPs (own[1], own[2]) are both 0 there",
    ("dse/roofline/pricing.py", "zip(own, dense, csr, strict=True)]", "True -> False"):
        "zip(strict=False): own, dense and csr are all four arrays, built together",
    ("dse/roofline/pricing.py",
     "for j, (ps, chip) in enumerate(zip(producers, on_chip, strict=True)):", "True -> False"):
        "zip(strict=False): on_chip is built from producers, one tuple per op",
    ("dse/roofline/pricing.py", "for i, kept in zip(ps, chip, strict=True):", "True -> False"):
        "zip(strict=False): each chip tuple is built from its ps, one flag per producer",
    ("dse/roofline/pricing.py", "@dataclass(frozen=True, eq=False)", "False -> True #2"):
        "KernelArrays are returned and read field by field, never compared nor hashed",
    ("dse/roofline/pricing.py", "@dataclass(frozen=True, eq=False)", "False -> True #3"):
        "RuleEdges are returned and read field by field, never compared nor hashed",
    ("dse/roofline/layer_sums.py",
     "sums = pd.DataFrame(values, copy=False).groupby(labels, sort=False).sum()",
     "False -> True #2"): "_pandas_group_sums serves only the self-check, whose probe's "
                          "labels ascend: there sort=True orders the groups as they come and "
                          "sums the same bits, so the check passes and the fast sums serve "
                          "(on descending contiguous labels pandas' bits would differ)",
    ("dse/roofline/layer_sums.py",
     "rng = np.random.default_rng(20261126)",
     "20261126 -> 20261127"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "base = rng.standard_normal((600, 3)) * 10.0 ** rng.integers(-3, 17, (600, 3))",
     "* -> /"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "base = rng.standard_normal((600, 3)) * 10.0 ** rng.integers(-3, 17, (600, 3))",
     "** -> *"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "base = rng.standard_normal((600, 3)) * 10.0 ** rng.integers(-3, 17, (600, 3))",
     "10.0 -> 20.0"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "base = rng.standard_normal((600, 3)) * 10.0 ** rng.integers(-3, 17, (600, 3))",
     "17 -> 18"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "base = rng.standard_normal((600, 3)) * 10.0 ** rng.integers(-3, 17, (600, 3))",
     "3 -> 4 #2"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "(base[:, :1], contiguous)]",
     "1 -> 2"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "nan[5, 1], nan[400, 0], nan[401, 2], nan[402, 2] = np.nan, np.inf, np.inf, -np.inf",
     "0 -> 1"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "nan[5, 1], nan[400, 0], nan[401, 2], nan[402, 2] = np.nan, np.inf, np.inf, -np.inf",
     "1 -> 2"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "nan[5, 1], nan[400, 0], nan[401, 2], nan[402, 2] = np.nan, np.inf, np.inf, -np.inf",
     "400 -> 401"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "nan[5, 1], nan[400, 0], nan[401, 2], nan[402, 2] = np.nan, np.inf, np.inf, -np.inf",
     "401 -> 402"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "nan[5, 1], nan[400, 0], nan[401, 2], nan[402, 2] = np.nan, np.inf, np.inf, -np.inf",
     "402 -> 403"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "nan[5, 1], nan[400, 0], nan[401, 2], nan[402, 2] = np.nan, np.inf, np.inf, -np.inf",
     "5 -> 6"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "nan[5, 1], nan[400, 0], nan[401, 2], nan[402, 2] = np.nan, np.inf, np.inf, -np.inf",
     "drop unary -"): _SUM_PROBE,
    ("dse/roofline/layer_sums.py",
     "probes += [(nan, contiguous), (nan[:, :1], contiguous)]",
     "1 -> 2"): _SUM_PROBE,
    # dse/roofline, the last survivors of the full run (2026-11-27, task 60): defaults read only
    # through max(..., j >= 0), a floor every peak is above, a value np.where discards.
    ("dse/roofline/kernels.py", "compute = np.where(vector > tensor, vector, tensor)", "> -> >="):
        "at vector == tensor both branches are the same number; only a zero's sign could tell "
        "them apart, and both times are sums of FLOP counts >= 0 (Trace validation) times "
        "batch x reciprocal rates > 0, never -0.0 (a NaN fails > and >= alike)",
    ("dse/roofline/memory.py",
     'last_use = np.where(ops["is_output"].to_numpy(dtype=bool), n - 1, -1)', "1 -> 2 #2"):
        "a non-output's default last use (-1 or -2) is read only through max(last_use, j) with "
        "j >= 0 (a consumer's index, np.arange(n)): any negative default gives the same end",
    ("dse/roofline/memory.py", "input_last = -1", "1 -> 2"):
        "input_last is read only as max(input_last, 0): -1 and -2 both give 0",
    ("dse/roofline/memory.py",
     "largest = np.where(per_sample > 0, np.floor(room / per_sample), MAX_BATCH)", "> -> >="):
        "per_sample >= 1 B, never 0: the DRAM peak holds the model input (>= 1 element: "
        "input_shape is positive integers) at op 0, and every dtype is >= 1 B (DTYPE_BYTES)",
    ("dse/roofline/memory.py", "largest = np.where(room < 0, 0, np.clip(largest, 0, MAX_BATCH))",
     "< -> <="):
        "at room == 0, floor(0 / per_sample) = 0 (per_sample >= 1 B, see the > -> >= entry "
        "above): 0 either way",
    ("dse/roofline/memory.py", "largest = np.where(room < 0, 0, np.clip(largest, 0, MAX_BATCH))",
     "0 -> 1 #1"):
        "room < 1 instead of room < 0: for 0 <= room < 1 <= per_sample (>= 1 B, see above) "
        "floor(room / per_sample) is 0 as well",
    ("dse/roofline/pricing.py", ".fillna(0).to_numpy(dtype=np.float64)", "0 -> 1"):
        "an unrouted op of a routed trace given 1 set, 1 set a token and 1 token a sample: "
        "weight_sets gives 1 either way, and weight_read_share reads 1 - (1 - 1/1)^T = 1 of its "
        "weights (T = batch > 0), as an unrouted op's share 1; nothing else reads _routed",
    ("dse/roofline/pricing.py", "return np.where(routed[0] > 0, routed[0], 1.0)", "0 -> 1 #2"):
        "sets is an expert count: 0 for an unrouted op (fillna), else E >= 1 (workloads.llm "
        "takes num_local_experts as a positive integer); at E = 1 both sides give 1",
    ("dse/roofline/pricing.py", "share = touched_share(np.where(routed_op, sets, 1.0), per_token,",
     "1.0 -> 2.0"):
        "the placeholder E of an unrouted op: its share is discarded by the next line's "
        "np.where(routed_op, share, 1.0)",
    ("dse/roofline/layer_sums.py",
     "mask=None, result_mask=None, min_count=0, is_datetimelike=False, initial=0,",
     "False -> True"):
        "is_datetimelike=True: for float64 values pandas' group_sum treats only NaN as missing "
        "(NaT is an int64 value); the same bits on 300 random probes with -2**63, NaN, +-inf "
        "and signed zeros (task 60; test_group_sums_of_the_float_equal_to_nat passes either way)",
    # Two former timeouts that ran again under the checked-timeout rule (2026-11-27, task 60).
    ("dse/roofline/evaluator.py", "@dataclass(frozen=True)", "True -> False #3"):
        "a _Capabilities is a probe built afresh by each _native_row_cached call and only read "
        "(supports_nm and supports_block read its two fields): nothing assigns, compares or "
        "hashes it",
    ("dse/roofline/evaluator.py", "@lru_cache(maxsize=1024)", "1024 -> 1025 #1"):
        _CACHE_SIZE,
    # dse/design_columns.py, design_table (dse.evaluate's fast path; 2026-11-26, a sample of 60,
    # seed 0): what survives changes only which path builds the same table.
    ('dse/design_columns.py',
     'SMALL_TABLE_ROWS = 64',
     '64 -> 65'): _SAME_TABLE,
    ('dse/design_columns.py',
     'label = np.concatenate(labels) if len(labels) > 1 else labels[0]',
     '> -> >='): _ONE_ARRAY,
    ('dse/design_columns.py',
     'prunable = np.concatenate(kept) if len(kept) > 1 else kept[0]',
     '> -> >='): _ONE_ARRAY,
    ('dse/design_columns.py',
     'if n > SMALL_TABLE_ROWS or not _direct_frames():',
     '> -> >='): _SAME_TABLE,
    ('dse/design_columns.py',
     '@lru_cache(maxsize=1024)',
     '1024 -> 1025'): _SAME_TABLE,
    ('dse/design_columns.py',
     'pd.RangeIndex(n), verify_integrity=False)',
     'False -> True'): _SAME_TABLE,
    ('dse/design_columns.py',
     'return False',
     'False -> True #1'): 'unreachable: pandas 3 has pandas._config.using_string_dtype',
    ('dse/design_columns.py', '@lru_cache(maxsize=64)', '64 -> 65 #1'): _SAME_TABLE,
    ('dse/design_columns.py', '@lru_cache(maxsize=64)', '64 -> 65 #2'): _SAME_TABLE,
    ('dse/design_columns.py', '@lru_cache(maxsize=256)', '256 -> 257'): _SAME_TABLE,
    ('dse/design_columns.py',
     'sums = group_sums(np.concatenate(parts) if len(parts) > 1 else parts[0], label, n)',
     '> -> >='): _ONE_ARRAY,
    ('dse/design_columns.py',
     'stored[np.bincount(label[prunable], minlength=n) == 0] = np.nan  # no prunable op',
     '0 -> 1'):
        "memory_from_stored reads NaN as 0 B (no prunable op), so a design without one is "
        "priced alike; one with exactly one prunable op turns NaN, and the NaN check sends the "
        "table down the frames' path, which builds the same table",
    ('dse/design_columns.py', 'if value.dtype == object:', '== -> !='): _SAME_TABLE,
    ('dse/design_columns.py',
     'probe = {"s": np.array(["a", "", "b"], dtype=object), "c": "fp16", "i": 7, "x": 0.5,',
     '7 -> 8'): _PROBE,
    ('dse/design_columns.py',
     'probe = {"s": np.array(["a", "", "b"], dtype=object), "c": "fp16", "i": 7, "x": 0.5,',
     '0.5 -> 1.0'): _PROBE,
    ('dse/design_columns.py',
     'same = (type(mine.index) is type(theirs.index)',
     'and -> or'): _CHECK,
    ('dse/design_columns.py',
     'offset, n_designs = 0, len(problem.design_index()[0])',
     '0 -> 1 #2'): "design_index()'s arrays are parallel: [1] has [0]'s length",
    ('dse/design_columns.py',
     'elif value.dtype.kind not in "fib":',
     'not in -> in'): _SAME_TABLE,
    ('dse/design_columns.py',
     'elif not isinstance(value, pd.arrays.BooleanArray | pd.arrays.IntegerArray):',
     'drop not'): _SAME_TABLE,
    ('dse/design_columns.py',
     '"f": np.array([1.0, np.nan, -0.0]), "n": np.array([1, 2, 3]),',
     '1.0 -> 2.0'): _PROBE,
    ('dse/design_columns.py',
     '"f": np.array([1.0, np.nan, -0.0]), "n": np.array([1, 2, 3]),',
     '2 -> 3'): _PROBE,
    ('dse/design_columns.py',
     '"b": np.array([True, False, True]),',
     'True -> False #1'): _PROBE,
    ('dse/design_columns.py',
     '"b": np.array([True, False, True]),',
     'False -> True'): _PROBE,
    ('dse/design_columns.py',
     '"f": np.array([1.0, np.nan, -0.0]), "n": np.array([1, 2, 3]),',
     '0.0 -> 1.0'): _PROBE,
    ('dse/design_columns.py',
     '"k": pd.arrays.BooleanArray(np.array([True, False, False]),',
     'False -> True #1'): _PROBE,
    ('dse/design_columns.py',
     '"k": pd.arrays.BooleanArray(np.array([True, False, False]),',
     'False -> True #2'): _PROBE,
    ('dse/design_columns.py',
     'np.array([False, False, True])),',
     'True -> False'): _PROBE,
    ('dse/design_columns.py',
     '"m": pd.arrays.IntegerArray(np.array([3, 0, 1]), np.array([False, True, False]))}',
     '3 -> 4'): _PROBE,
    ('dse/design_columns.py',
     '"m": pd.arrays.IntegerArray(np.array([3, 0, 1]), np.array([False, True, False]))}',
     '0 -> 1'): _PROBE,
    ('dse/design_columns.py',
     '"m": pd.arrays.IntegerArray(np.array([3, 0, 1]), np.array([False, True, False]))}',
     'True -> False'): _PROBE,
    ('dse/design_columns.py',
     'and all(type(mine[c].array) is type(theirs[c].array)',
     'and -> or'): _CHECK,
    ('dse/design_columns.py',
     '"fits": pd.arrays.BooleanArray(np.where(known, peak <= capacity, False), ~known),',
     'False -> True'): _MASKED,
    # The rest of the full run's survivors (2026-11-27): the probe's values, its check and the
    # largest batch's masked fill.
    ('dse/design_columns.py',
     'largest = pd.arrays.IntegerArray(np.where(known, largest, 0).astype(np.int64), ~known)',
     '0 -> 1'): _MASKED,
    ('dse/design_columns.py',
     '"f": np.array([1.0, np.nan, -0.0]), "n": np.array([1, 2, 3]),',
     '1 -> 2'): _PROBE,
    ('dse/design_columns.py',
     '"f": np.array([1.0, np.nan, -0.0]), "n": np.array([1, 2, 3]),',
     '3 -> 4'): _PROBE,
    ('dse/design_columns.py', '"b": np.array([True, False, True]),', 'True -> False #2'): _PROBE,
    ('dse/design_columns.py',
     '"k": pd.arrays.BooleanArray(np.array([True, False, False]),',
     'True -> False'): _PROBE,
    ('dse/design_columns.py', 'np.array([False, False, True])),', 'False -> True #1'): _PROBE,
    ('dse/design_columns.py', 'np.array([False, False, True])),', 'False -> True #2'): _PROBE,
    ('dse/design_columns.py',
     '"m": pd.arrays.IntegerArray(np.array([3, 0, 1]), np.array([False, True, False]))}',
     '1 -> 2'): _PROBE,
    ('dse/design_columns.py',
     '"m": pd.arrays.IntegerArray(np.array([3, 0, 1]), np.array([False, True, False]))}',
     'False -> True #1'): _PROBE,
    ('dse/design_columns.py',
     '"m": pd.arrays.IntegerArray(np.array([3, 0, 1]), np.array([False, True, False]))}',
     'False -> True #2'): _PROBE,
    ('dse/design_columns.py',
     'pd.testing.assert_frame_equal(mine, theirs, check_exact=True)',
     'True -> False'): _CHECK,
    ('dse/design_columns.py', 'same = False', 'False -> True'):
        "the except branch: on this pandas the probe raises nothing (it guards other pandas "
        "versions, whose frames may differ)",
}

_BINOPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
           ast.FloorDiv: ast.Div, ast.Pow: ast.Mult, ast.Mod: ast.FloorDiv}
_CMPOPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
           ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
           ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
            ast.Pow: "**", ast.Mod: "%", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
            ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in",
            ast.Is: "is", ast.IsNot: "is not", ast.And: "and", ast.Or: "or"}


@dataclasses.dataclass(frozen=True)
class Mutant:
    file: str
    index: int  #: the index of the mutation point in the file's walk
    line: int
    change: str
    text: str = ""  #: the mutated line's source, stripped
    #: 1, 2, ... in source order among the file's mutants of the same ``text`` and ``change``
    #: where there are several (0 where the pair is unique)
    occurrence: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        """What :data:`EQUIVALENT` is keyed by: stable under edits elsewhere in the file."""
        return (self.file, self.text,
                f"{self.change} #{self.occurrence}" if self.occurrence else self.change)


def _skipped(tree: ast.AST) -> set[int]:
    """ids of nodes left alone: docstrings, f-strings, raise statements, ``__all__``."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            skip.update(id(n) for n in ast.walk(first))
        if isinstance(node, (ast.JoinedStr, ast.Raise)):
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _points(tree: ast.AST) -> list[tuple[ast.AST, str, object]]:
    """Every mutation point in walk order: (node, description, how to apply)."""
    skip = _skipped(tree)
    points = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            new = _BINOPS[type(node.op)]
            points.append((node, f"{_SYMBOLS[type(node.op)]} -> {_SYMBOLS[new]}", ("op", new)))
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _CMPOPS:
                    new = _CMPOPS[type(op)]
                    points.append((node, f"{_SYMBOLS[type(op)]} -> {_SYMBOLS[new]}",
                                   ("cmp", i, new)))
        elif isinstance(node, ast.BoolOp):
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            points.append((node, f"{_SYMBOLS[type(node.op)]} -> {_SYMBOLS[new]}", ("op", new)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)) \
                and not (isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)):
            what = "not" if isinstance(node.op, ast.Not) else "unary -"
            points.append((node, f"drop {what}", ("unary",)))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            points.append((node, f"{node.value} -> {not node.value}", ("const", not node.value)))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            value = node.value
            new = value + 1 if isinstance(value, int) else (1.0 if value == 0 else 2 * value)
            points.append((node, f"{value!r} -> {new!r}", ("const", new)))
    return points


class _Apply(ast.NodeTransformer):
    def __init__(self, target: ast.AST, how) -> None:
        self.target, self.how = target, how

    def visit(self, node):
        if node is not self.target:
            return self.generic_visit(node)
        kind = self.how[0]
        if kind == "op":
            node.op = self.how[1]()
        elif kind == "cmp":
            node.ops[self.how[1]] = self.how[2]()
        elif kind == "unary":
            return node.operand
        elif kind == "const":
            node.value = self.how[1]
        return node


def mutants(file: str) -> list[Mutant]:
    source = (ROOT / file).read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for i, (node, change, _) in enumerate(_points(ast.parse(source))):
        line = getattr(node, "lineno", 0)
        text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        found.append((Mutant(file, i, line, change, text), getattr(node, "col_offset", 0)))
    # Mutants whose line text and change are alike (a repeated line, a line with two 1s) are
    # told apart by their order in the file.
    same: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    for m, col in found:
        same.setdefault((m.text, m.change), []).append((m.line, col, m.index))
    rank = {}
    for places in same.values():
        if len(places) > 1:
            rank.update({index: n for n, (_, _, index) in enumerate(sorted(places), 1)})
    return [dataclasses.replace(m, occurrence=rank.get(m.index, 0)) for m, _ in found]


def stale_equivalents(files: tuple[str, ...] | None = None) -> list[tuple[str, str, str]]:
    """The :data:`EQUIVALENT` keys (of ``files``, or all) that match no mutant any more: the
    line was edited or removed, so the explanation must be checked and moved or dropped."""
    wanted = {f for f, _, _ in EQUIVALENT} if files is None else set(files)
    keys = {m.key for f in wanted if (ROOT / f).is_file() for m in mutants(f)}
    return [key for key in EQUIVALENT if key[0] in wanted and key not in keys]


def disproved_equivalents(journal: Path) -> list[tuple[str, str, str]]:
    """The :data:`EQUIVALENT` keys whose mutant ``journal`` records killed (a timeout only once
    checked against the load) on its file as it is now: a test tells those apart, so their
    explanations are wrong and must be dropped."""
    digests: dict[str, str] = {}
    found: dict[tuple[str, str, str], None] = {}  # in the journal's order, each key once
    for key, file_sha in Journal(journal).kills:
        if key in EQUIVALENT and (ROOT / key[0]).is_file():
            if key[0] not in digests:
                digests[key[0]] = file_digest(ROOT, key[0])
            if file_sha == digests[key[0]]:
                found[key] = None
    return list(found)


def mutated_source(mutant: Mutant) -> str:
    tree = ast.parse((ROOT / mutant.file).read_text(encoding="utf-8"))
    tree = copy.deepcopy(tree)
    node, _, how = _points(tree)[mutant.index]
    tree = _Apply(node, how).visit(tree)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _copy_repository(into: Path) -> Path:
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "test-artifacts",
                                    "*.egg-info", "site", ".pytest_cache", ".hypothesis")
    target = into / "repo"
    shutil.copytree(ROOT, target, ignore=ignore, symlinks=True)
    return target


#: Appended to a timeout's line once the mutant timed out a second time, against 3x the
#: unmutated subset's time measured again just before: the mutant is slow, not the machine.
TIMEOUT_CHECKED = "also against 3x the unmutated subset timed just before"


def _run_tests(repo: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[bool, float, str]:
    """(passed, seconds, pytest's last line) of the test subset in ``repo``; a timeout counts
    as a failure."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(repo))
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                               "no:cacheprovider", *tests], cwd=repo, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s)
        passed, last = done.returncode == 0, (done.stdout.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        passed, last = False, f"timed out after {timeout_s:.0f} s"
    return passed, time.perf_counter() - started, last


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(repo: Path, file: str) -> str:
    """SHA-256 of ``file`` in ``repo`` as it is unmutated: a journal entry's ``file_sha256``."""
    return _digest((repo / file).read_bytes())


def tests_digest(repo: Path, tests: tuple[str, ...]) -> str:
    """SHA-256 of a test subset: its ids (``FILE`` or ``FILE::TEST``) and the contents of
    their files, so that an edited test file, or another subset, invalidates the entries."""
    h = hashlib.sha256()
    for spec in tests:
        h.update(spec.encode() + b"\0")
    for file in sorted({spec.split("::")[0] for spec in tests}):
        path = repo / file
        h.update(file.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"(none)"))
    return h.hexdigest()


class Journal:
    """The results a ``--journal`` file holds (JSON lines, appended one per mutant as it ends)
    and the appending of new ones. An entry counts where its mutant's key, its file's digest
    and its test subset's digest match; lines that do not parse (a line torn by a kill) and
    entries of edited files or tests are left out (and kept in the file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[tuple, dict] = {}
        self.kills: dict[tuple, dict] = {}  # (key, file digest) -> a kill under any tests
        self.torn = 0
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        # A torn last line (a kill mid-write) must not glue itself to the next entry.
        self._newline_first = bool(text) and not text.endswith("\n")
        if text:
            for line in text.splitlines():
                try:
                    entry = json.loads(line)
                    key = (tuple(entry["key"]), entry["file_sha256"], entry["tests_sha256"])
                    if not isinstance(entry["killed"], bool):
                        raise TypeError("killed")
                    if str(entry.get("last", "")).startswith("timed out") \
                            and TIMEOUT_CHECKED not in entry["last"]:
                        continue  # a timeout never checked against the load: runs again
                    self.entries[key] = entry  # a later line for the same mutant wins
                    if entry["killed"]:
                        self.kills[key[:2]] = entry
                except (ValueError, KeyError, TypeError):
                    self.torn += bool(line.strip())

    def get(self, mutant: Mutant, file_sha: str, tests_sha: str) -> dict | None:
        """The entry of ``mutant`` for this file and test subset; else a kill of it under any
        earlier test subset of the same file (tests added to kill survivors change the
        subset's digest, and a test added never revives a mutant), else None."""
        entry = self.entries.get((mutant.key, file_sha, tests_sha))
        if entry is None:
            entry = self.kills.get((mutant.key, file_sha))
        return entry

    def add(self, module: str, mutant: Mutant, file_sha: str, tests_sha: str, killed: bool,
            last: str, seconds: float) -> None:
        entry = {"module": module, "key": list(mutant.key), "file": mutant.file,
                 "line": mutant.line, "change": mutant.change, "killed": killed,
                 "last": last, "seconds": round(seconds, 3), "file_sha256": file_sha,
                 "tests_sha256": tests_sha,
                 "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(("\n" if self._newline_first else "") + json.dumps(entry) + "\n")
            self._newline_first = False
            handle.flush()
            os.fsync(handle.fileno())
        self.entries[(mutant.key, file_sha, tests_sha)] = entry
        if killed:
            self.kills[(mutant.key, file_sha)] = entry


def run_module(name: str, repo: Path, limit: int | None, seed: int,
               at: set[str] | None = None,
               journal: Journal | None = None) -> tuple[list[Mutant], list[Mutant]]:
    """Run ``name``'s mutants (only those on the lines ``at``, ``FILE:LINE``, or only those
    changes, ``FILE:LINE:CHANGE``, when given); returns (those that ran, the survivors).
    With a ``journal``, mutants it holds a current result of are not run again (their
    results count), and each new result is appended to it."""
    files, tests = MODULES[name]
    every = [m for f in files for m in mutants(f)
             if not at or f"{m.file}:{m.line}" in at or f"{m.file}:{m.line}:{m.change}" in at]
    chosen = every if limit is None or limit >= len(every) else \
        sorted(random.Random(seed).sample(every, limit), key=lambda m: (m.file, m.index))
    digests = {f: file_digest(repo, f) for f in files}
    tests_sha = tests_digest(repo, tests)
    held = {}
    if journal is not None:
        for m in chosen:
            entry = journal.get(m, digests[m.file], tests_sha)
            if entry is not None:
                held[m] = bool(entry["killed"])
    todo = [m for m in chosen if m not in held]
    baseline = 0.0
    if todo:  # every result in the journal: no test needs to run
        passed, baseline, _ = _run_tests(repo, tests, 600)
        if not passed:
            raise SystemExit(f"{name}: the test subset fails on the unmutated code "
                             f"({' '.join(tests)}); fix it first")
    timeout_s = 3 * baseline + 10
    print(f"{name}: {len(chosen)} of {len(every)} mutants"
          + (f" ({len(held)} from the journal, {len(todo)} to run)" if journal else "")
          + f", tests {' '.join(tests)}"
          + (f" ({baseline:.1f} s unmutated)" if todo else ""), flush=True)
    survivors = [m for m in chosen if m in held and not held[m]]
    for n, mutant in enumerate(todo, 1):
        target = repo / mutant.file
        original = target.read_text(encoding="utf-8")
        try:
            target.write_text(mutated_source(mutant), encoding="utf-8")
            passed, seconds, last = _run_tests(repo, tests, timeout_s)
            if last.startswith("timed out"):
                # A timeout kills only if the mutant is slow, not the machine: time the
                # unmutated subset now, under the present load, and run the mutant again
                # against 3x that (a loaded machine had counted equivalent mutants killed).
                target.write_text(original, encoding="utf-8")
                _, now, _ = _run_tests(repo, tests, 600)
                target.write_text(mutated_source(mutant), encoding="utf-8")
                timeout_s = max(timeout_s, 3 * now + 10)
                passed, seconds, last = _run_tests(repo, tests, timeout_s)
                if last.startswith("timed out"):
                    last += f" {TIMEOUT_CHECKED} ({now:.0f} s)"
            killed = not passed
        finally:
            target.write_text(original, encoding="utf-8")
        if journal is not None:
            journal.add(name, mutant, digests[mutant.file], tests_sha, killed, last, seconds)
        if not killed:
            survivors.append(mutant)
        print(f"  [{n}/{len(todo)}] {mutant.file}:{mutant.line}: {mutant.change}: "
              f"{'killed' if killed else 'SURVIVED'} ({last})", flush=True)
    order = {m: i for i, m in enumerate(chosen)}
    return chosen, sorted(survivors, key=order.__getitem__)


def build_parser() -> Parser:
    parser = Parser(prog="python -m benchmarks.mutation",
                    description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=sorted(MODULES),
                        help="a module to mutate; repeatable (default: all)")
    parser.add_argument("--max", type=int, default=None, metavar="N",
                        help="sample at most N mutants a module (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    parser.add_argument("--at", action="append", metavar="FILE:LINE[:CHANGE]",
                        help="only the mutants on this line (e.g. a survivor, to check the test "
                             "written for it), or only its CHANGE as a run prints it "
                             "('dse/roofline/energy.py:133:* -> /'); repeatable")
    parser.add_argument("--list", action="store_true", help="list the mutants; run nothing")
    parser.add_argument("--journal", type=Path, metavar="FILE",
                        help="JSON lines of every mutant's result, appended as each ends; a "
                             "rerun skips the mutants it holds (unless their file or tests "
                             "changed) and counts their results: a long run resumable")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    journal = None
    if args.journal is not None and args.list:
        print("mutation: --journal with --list: --list runs nothing, so nothing is journaled; "
              "leave out one of the two", file=sys.stderr)
        return 2
    if args.journal is not None:
        problem = _journal_problem(args.journal)
        if problem:
            print(f"mutation: --journal {args.journal}: {problem}", file=sys.stderr)
            return 2
        journal = Journal(args.journal)
        if journal.torn:
            print(f"--journal {args.journal}: {journal.torn} line(s) that do not parse left "
                  "out (a run killed mid-write); their mutants run again", flush=True)
    names = args.module or list(MODULES)
    files = tuple(f for name in names for f in MODULES[name][0])
    if args.list:
        for name in names:
            for f in MODULES[name][0]:
                for m in mutants(f):
                    print(f"{name}\t{m.file}:{m.line}\t{m.change}"
                          + ("\tequivalent" if m.key in EQUIVALENT else ""))
        _print_stale(files if args.module else None)
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="dse-mutation-") as folder:
        repo = _copy_repository(Path(folder))
        for name in names:
            results[name] = run_module(name, repo, args.max, args.seed,
                                       set(args.at) if args.at else None, journal)
    print("\nmodule      killed / run   share   survivors explained")
    for name, (chosen, survivors) in results.items():
        ran, killed = len(chosen), len(chosen) - len(survivors)
        explained = sum(m.key in EQUIVALENT for m in survivors)
        print(f"{name:<11} {killed:>6} / {ran:<5} {killed / ran if ran else float('nan'):7.1%}"
              f"   {explained} / {len(survivors)}")
        for m in survivors:
            why = EQUIVALENT.get(m.key)
            print(f"    survived {m.file}:{m.line}: {m.change}"
                  + (f" (equivalent: {why})" if why else f"\n        unexplained; key {m.key!r}"))
    for chosen, survivors in results.values():
        # An explanation a test disproves: the mutant it calls equivalent is killed.
        for m in chosen:
            if m.key in EQUIVALENT and m not in survivors:
                print(f"EQUIVALENT entry of a mutant the tests kill ({m.file}:{m.line}: "
                      f"{m.change}; a test tells it apart, so drop the entry): {m.key!r}")
    _print_stale(files if args.module else None)
    return 0


def _journal_problem(path: Path) -> str | None:
    """Why ``path`` cannot be the journal (one clause with the fix), or None: checked before
    the repository is copied or any test runs."""
    if path.is_dir():
        return "is a folder; give a file (e.g. roofline.jsonl)"
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        return f"no folder {folder}; create it or give another path"
    if path.exists():
        try:
            path.read_text(encoding="utf-8")
            with path.open("a", encoding="utf-8"):
                pass
        except (OSError, UnicodeDecodeError) as exc:
            return f"cannot be read and appended to ({exc}); give another file"
        return None
    try:  # os.access says yes to root everywhere; creating a file tells
        handle, name = tempfile.mkstemp(prefix=".mutation-check-", dir=folder)
    except OSError as exc:
        return f"cannot write in {folder} ({exc.strerror or exc}); give a writable folder"
    os.close(handle)
    os.unlink(name)
    return None


def _print_stale(files: tuple[str, ...] | None) -> None:
    for key in stale_equivalents(files):
        print(f"stale EQUIVALENT entry, matching no mutant (its line was edited or removed; "
              f"check it, then move or drop it): {key!r}")


if __name__ == "__main__":
    sys.exit(main())
