"""The one seam features plug in through: `Feature.contribute(c: Contributions)`.

`contributions.py` is the seam; `settings.py` the base of every configuration section. The
built-in features (the analyzer, the proactive engine) use exactly this seam, as a third-party
feature would. Nothing is re-exported here, so loading the configuration stays light.
"""
