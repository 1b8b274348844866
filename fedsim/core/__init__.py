"""Plugin-independent building blocks that every layer stands on; imports nothing above itself.

``sections`` (config models' base classes), ``registry`` (name -> plugin), ``errors``, ``wire`` (the keys
of fedsim's Flower messages), ``messaging``, ``seeding``, ``atomic`` (durable writes), ``devices``,
``evaluation``, ``stopping`` and ``notices`` (warnings as one log line each).
"""
