"""The environment: the files a Plan is written as (environment.yml, install.sh, requirements,
a uv project, cudalock.toml) and, with ``--create``, the environment built from them.

The package exports nothing itself: each name is imported from the module that holds it
(``spec``: cudalock.toml; ``render``: the files; ``bootstrap``: the command). So ``cudalock
lock``, which reads cudalock.toml, loads none of bootstrap's machinery (the renderers, YAML).
"""
