"""KernelBench's format: problems (``Model``, ``get_inputs``, ``get_init_inputs``) and candidates
(``ModelNew``), judged by gpuemu's fuzzing and error model, with verdicts against reward hacking
(docs/kernelbench.md)."""

from ._judge import PairResult, ProblemOp, judge_candidate, judge_pair
from ._load import Candidate, Problem, load_candidate, load_problem

__all__ = ["Candidate", "PairResult", "Problem", "ProblemOp", "judge_candidate", "judge_pair", "load_candidate",
           "load_problem"]
