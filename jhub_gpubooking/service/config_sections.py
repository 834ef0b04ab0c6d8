"""Options that moved: from the service's flat section to its components' sections, or to a
new name. Applied to every config the service loads, with one deprecation line each.

Up to 0.1 every option was ``c.GPUBookingService.<option>``; now each component of the
service (``c.Lifecycle``, ``c.AdmissionWebhook``, ...) has its own section. A config file that
still sets a moved option under its old name keeps working: :func:`move_options` moves the
value to its new place and logs one line naming it. The moves out of the flat section are
derived from the components' own traits, so a new component option needs no code here; only
an option whose *name* changed is listed by hand (``renamed``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from copy import deepcopy

from traitlets.config import Config, Configurable

#: Where an option is set: (section, option name).
Place = tuple[str, str]


def moved_options(
    flat_section: str,
    components: Iterable[type[Configurable]],
    renamed: Mapping[Place, Place] = {},
) -> dict[Place, Place]:
    """Old place → new place of every config option of ``components`` (once set in
    ``flat_section``), and of the ``renamed`` options."""
    table: dict[Place, Place] = {}
    for component in components:
        for name in component.class_own_traits(config=True):
            table[(flat_section, name)] = (component.__name__, name)
    table.update(renamed)
    return table


def move_options(config: Config, moved: Mapping[Place, Place], log: logging.Logger) -> Config:
    """``config`` with every option set at an old place of ``moved`` set at its new place.

    A value already set at the new place wins: the old one is dropped, and the log says so.
    ``config`` itself is left unchanged (traitlets shares one Config between components).
    """
    old_places = [
        (section, name)
        for section, value in config.items()
        if isinstance(value, Mapping)
        for name in value
        if (section, name) in moved
    ]
    if not old_places:
        return config
    config = deepcopy(config)
    for section, name in old_places:
        value = config[section].pop(name)
        new_section, new_name = moved[(section, name)]
        if new_name in config[new_section]:
            log.warning(
                "c.%s.%s is deprecated and ignored here: c.%s.%s is set too and wins",
                section, name, new_section, new_name,
            )
            continue
        config[new_section][new_name] = value
        log.warning("c.%s.%s is deprecated: set c.%s.%s instead", section, name, new_section,
                    new_name)
    return config
