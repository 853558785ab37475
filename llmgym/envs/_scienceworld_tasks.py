"""ScienceWorld's 30 tasks, by the suite's own names, without importing scienceworld.

Kept in sync with ``scienceworld.constants.ID2TASK`` (a test checks it) so that registering the
``llmgym/ScienceWorld-*`` ids keeps ``import llmgym`` light.
"""

from __future__ import annotations

__all__ = ["SCIENCEWORLD_TASKS", "task_id_name"]

#: Task name (as ScienceWorld names it) -> "topic: task" as the ScienceWorld paper lists it.
SCIENCEWORLD_TASKS: dict[str, str] = {
    "boil": "Matter: Changes of State (Boiling)",
    "melt": "Matter: Changes of State (Melting)",
    "freeze": "Matter: Changes of State (Freezing)",
    "change-the-state-of-matter-of": "Matter: Changes of State (Any)",
    "use-thermometer": "Measurement: Use Thermometer",
    "measure-melting-point-known-substance": "Measurement: Measure a melting point (known substance)",
    "measure-melting-point-unknown-substance": "Measurement: Measure a melting point (unknown substance)",
    "power-component": "Electricity: Create a circuit",
    "power-component-renewable-vs-nonrenewable-energy": "Electricity: Renewable vs Non-renewable Energy",
    "test-conductivity": "Electricity: Test Conductivity (known)",
    "test-conductivity-of-unknown-substances": "Electricity: Test Conductivity (unknown)",
    "find-living-thing": "Classification: Find a living thing",
    "find-non-living-thing": "Classification: Find a non-living thing",
    "find-plant": "Classification: Find a plant",
    "find-animal": "Classification: Find an animal",
    "grow-plant": "Biology: Grow a plant",
    "grow-fruit": "Biology: Grow a fruit",
    "chemistry-mix": "Chemistry: Mixing (generic)",
    "chemistry-mix-paint-secondary-color": "Chemistry: Mixing paints (secondary colours)",
    "chemistry-mix-paint-tertiary-color": "Chemistry: Mixing paints (tertiary colours)",
    "lifespan-longest-lived": "Biology: Identify longest-lived animal",
    "lifespan-shortest-lived": "Biology: Identify shortest-lived animal",
    "lifespan-longest-lived-then-shortest-lived": "Biology: Identify longest-then-shortest-lived animal",
    "identify-life-stages-1": "Biology: Identify life stages (plant)",
    "identify-life-stages-2": "Biology: Identify life stages (animal)",
    "inclined-plane-determine-angle": "Forces: Inclined Planes (determine angle)",
    "inclined-plane-friction-named-surfaces": "Forces: Friction (known surfaces)",
    "inclined-plane-friction-unnamed-surfaces": "Forces: Friction (unknown surfaces)",
    "mendelian-genetics-known-plant": "Biology: Mendelian Genetics (known plants)",
    "mendelian-genetics-unknown-plant": "Biology: Mendelian Genetics (unknown plants)",
}


def task_id_name(task: str) -> str:
    """Return the CamelCase form of a task name used in env ids.

    Args:
        task: A ScienceWorld task name, e.g. ``"find-living-thing"``.

    Returns:
        E.g. ``"FindLivingThing"`` (``llmgym/ScienceWorld-FindLivingThing-v0``).
    """
    return "".join(part.capitalize() for part in task.split("-"))
