"""The run: built once (``build``: what is loaded and chosen, ``context``: what a run is built
from), driven by the epoch loop written once (``run``), with the method's part asked of its
``objectives`` (``sft``, ``dpo``, ``grpo``: the plan, the micro-step, the evaluation).

- ``run``: ``TrainingRun``, the loop and its hooks (a window checked against the plan, the save
  decided once per window); ``meters``: the loss and step meters; ``step_lines``,
  ``metrics_file``, ``tensorboard``: the records written.
- ``evaluation``: SFT's evaluation; ``reports``: the evaluation samples; ``selection``: the best
  model and early stopping.
- ``saving``: the run's checkpoints (the policy's answer, agreed by the ranks); ``stopping``:
  stop requests; ``replan``: the micro-batch halved after running out of memory;
  ``autobatch``: the "auto" micro-batch probe.
- ``packing_check``: a model's packed rows checked isolated; ``notices``: start-up warnings.
"""
