"""The typed schema of every config group (docs/design.md §3).

- :mod:`topk.schema.rules`: what a value may be (``whole(1)``, ``flag()``, ``choice(...)``) and
  the sentence that says so;
- :mod:`topk.schema.groups`: one dataclass per constructor a ``conf/`` option targets;
- :mod:`topk.schema.check`: a composed config held to them, and Hydra's composition errors said
  in one sentence;
- :mod:`topk.schema.paths`: the output folders a config names, held to what a file system can
  create (name lengths; a folder named after a whole config group);
- :mod:`topk.schema.store`: the schemas in Hydra's ConfigStore, and what the config search path
  offers;
- :mod:`topk.schema.validate`: the home of validation: the command line checked before Hydra
  starts, the one check of a job's composed config, and which entry makes each where;
- :mod:`topk.schema.targets`: the callables a config may name, those the config files of the
  search path name (docs/trust.md);
- :mod:`topk.schema.saved`: a run's saved configuration read back as data, for ``+eval``.
"""

from topk.schema.check import check_config, composition_problem, config_problem

__all__ = ["check_config", "composition_problem", "config_problem"]
