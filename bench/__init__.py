"""fedsim's benchmarks: each one a module run from the repository root as ``python -m bench.<name>``.

``python -m bench.<name> --help`` says what a benchmark measures and its options. Those that read images take
``--data-dir DIR`` (or the ``FEDSIM_DATA`` environment variable): the folder holding ``mnist_test.npz`` and
``cifar10_subset.npz``. Every summary they print comes from ``fedsim.reporting.summaries``, as the report's do:
PSNR by its median and the fractions of images at or above 30 and 40 dB, bounded scores by their mean, each
as ``value [low, high]`` with a 95 % bootstrap interval that stays inside the metric's range. A figure that
takes the best over attacks says so: "ground-truth selection over N attacks", beside each attack's own.

Benchmarks, and what each prints:

- ``startup``: the command line's start-up: wall time of ``--help``, ``list``, ``validate``, ``config-schema`` and
  ``sweep --dry-run`` (median of a few fresh runs), the import time behind them, and the heavy packages each
  imports.
- ``overhead``: fedsim's time per round against a bare Flower ``run_simulation`` of the same experiment,
  per repeat and the median ratio (``make bench``); with ``--fixed-cost``, what a run and a sequential sweep's
  point cost beyond their rounds (and attacks), with and without attacks, beside the bare simulation's.
- ``deployment``: a run on a local SuperLink and SuperNodes against the same run simulated (wall time, start-up,
  time per round) and a deployed round's parts: the ClientApp process per message, polling, serialisation.
- ``secagg``: ``timing``, SecAgg+'s time per round against FedAvg's and both accuracy curves on one seed;
  ``compare``, per-client against aggregated leakage as a markdown table per variant and federation size.
- ``attacks``: paper 003's set-up (per-client and aggregated DLG PSNR, labels, wall time, worker-process
  cost), batched against looped restarts, and Inverting Gradients' milliseconds per iteration.
- ``aggregate``: DLG's PSNR on a FedAvg aggregate of unequal partitions, modelled with the clients' shares
  and as one uniform mean.
- ``identifiability``: the rank and singular-value spectrum of d(gradient)/d(images) for batches of 1-3
  images, and with ``--oracle`` the smoothest gradient-equivalent images' PSNR.
- ``malicious``: Robbing the Fed (``rtf``) against FedAvg, SecAgg+ and the client defenses, and behind the
  server's weights or the global model's at two inits: images recovered, PSNR, SSIM and read-out time;
  ``--docs`` writes it into ``docs/results/aggregation.md``.
- ``closed_form``: ``fc-invert`` and ``cpa`` against an honest server's aggregate of 4-64 images, and their
  time per round beside ``rtf``.
- ``strongest``: per defense, the strongest attack's SSIM and PSNR on single-image updates of
  ``configs/defense-comparison.yaml`` and which attack won; ``--paper-003 --portfolio both``: the raced
  ``attacks: strongest`` against every attack at its full budget on paper 003's images (pick, PSNR, time).
- ``throughput``: targets per hour with paper 003's targets batched into one problem against one at a time, and
  CPU time per iteration, against breaching's Inverting Gradients on the same problem where breaching is
  installed (a GPU column where CUDA is present).
- ``adaptive_tuning``: plain Inverting Gradients against each defense's adaptive variant at its own settings
  and tuned with Optuna (``adversary.inversion.tuning``), on images never reported.
- ``defenses``: the defense table of ``configs/defense-evaluation.yaml`` over seeds: final accuracy, its gain
  over the public model and its drop, DP-SGD by the epsilon spent, and the attacker's pick, verdict and
  saturation on the models each defended run sent (rounds 1, 75 and 150), and the equal-utility table;
  ``--docs`` writes them into ``docs/results/defenses.md``.
- ``gradient_dropout``: Gradient Dropout on paper 004's sigmoid ResNet-18 (CIFAR-10, one image per update),
  Inverting Gradients and ``ig-dropout`` with the share of entries it matched; ``--docs`` writes it into
  ``docs/results/papers.md``.
- ``paper_results``: papers 000, 001 and 004's settings from the same sweep, one table; ``--docs`` writes it
  into ``docs/results/papers.md``.
- ``ggssr``: GGSS-R against Inverting Gradients, its noise-aware ``ig-noise``, DLG and unguided prior samples under
  gradient noise (PSNR).
- ``dip``: ``ig-dip`` against plain Inverting Gradients, clean and noisy, single images and a batch (PSNR).
- ``rv``: reconstruction vulnerability of fedsim's models beside Inverting Gradients' PSNR on each.
- ``audit``: the one-run privacy audit's lower bounds on epsilon (epsilon-delta and f-DP) beside the
  accountant's, for DP-SGD and central DP at epsilon 1, 4 and 8 (with Andrew et al.'s estimate at client level)
  and for the defenses without epsilon, and the canaries' cost in accuracy; ``--docs`` writes it into
  ``docs/results/privacy-audit.md`` and the README; ``--dpsgd``, DP-SGD at epsilon 4 beside the idealised mechanism.
- ``audit_design``: canary designs (count, guess counts, norm) audited on the idealised Gaussian mechanism,
  whose epsilon is known, each beside its ceiling (also ``audit --ideal``).
- ``app_audit``: ``fedsim audit`` on the example Flower apps (the app as written, under SecAgg+, with smaller steps
  and with its real batch size): the attacker's pick and its test per target, the oracle beside it; ``--docs``
  writes it into the README.
- ``fedleak``: FedLeak (partial gradient matching, gradient regularisation) beside tuned Inverting Gradients and
  random public images on the same clients' batches (SSIM, PSNR).
- ``text``: DAGER against a small GPT-2 fine-tuned by 4 clients, by batch size, LoRA, frozen embeddings and the
  aggregate: shares of sequences and tokens recovered, ROUGE, the floor and verdict.
- ``calibration``: the verdict's false-positive rate (guesses without the update scored as reconstructions) and
  power (degraded truth) on MNIST and CIFAR-10 targets of 1, 2 and 8 images, with binomial intervals.

Helpers, not benchmarks: ``common`` (data paths, summaries over seeds, per-image PSNR, sweeps, docs tables),
``defense_setup`` (the defense table's data split, public model and settings), ``defense_screen`` (its leakage
phase's screen, and which cells go on to full strength), ``defense_table`` (its rows as markdown and its
equal-utility cells), ``dpsgd_tuning`` (DP-SGD's clipping norm and learning rate tuned per epsilon on public
images), ``bare_flower_app`` (the bare Flower client app that ``overhead`` measures against) and
``breaching_driver`` (breaching's Inverting Gradients driven on a fedsim attacker view, where breaching is
installed, for ``throughput`` and ``attacks``).
"""
