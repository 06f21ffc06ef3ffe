"""pytest11 entry point `flagos`: hooks only; the work is in the modules they call.

Auto-loaded by every pytest run once the package is installed, so without a device it
registers its options, its markers and an idle FlagosPlugin and nothing else -- it does not
even import torch. The hooks that need the run's state are FlagosPlugin's; the state is in
config.stash (session.py).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import pytest

from . import areas, isolation, options, requirements
from . import session as state
from .fixtures import (  # noqa: F401  (pytest finds fixtures in the plugin module)
    assert_compiles_like_eager,
    compile_workers,
    flagos_capabilities,
    flagos_device,
    fresh_inductor_cache,
)

_DESELECTED_KEY = pytest.StashKey[list[str]]()
PLUGIN_NAME = "flagos-session"


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


@pytest.hookimpl(tryfirst=True)  # before the conftests, which may import torch
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    isolation.keep_torch_fl_out(early_config)
    _plugin_for(early_config)  # before the conftests: see FlagosPlugin


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _hypothesis_profile_option(config: pytest.Config) -> str | None:
    try:
        return config.getoption("hypothesis_profile")
    except ValueError:  # hypothesis's pytest plugin is not loaded
        return None


@pytest.hookimpl(tryfirst=True)  # before hypothesis's plugin loads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", areas.MARKER_HELP)
    config.addinivalue_line("markers", requirements.MARKER_HELP)
    chosen_profile = _hypothesis_profile_option(config)
    if chosen_profile and chosen_profile.startswith("flagos-"):
        from .profiles import register_profiles

        register_profiles()
    plugin = _plugin_for(config)
    plugin.activate()  # current() without a config now means this run, until pytest_unconfigure
    if not options.device_given(config):
        return  # inert

    from . import device as device_mod
    from . import expectations as expectations_mod
    from . import profiles

    settings = options.read_settings(config)
    _check_output_paths(config, settings)
    assert settings.device is not None  # device_given() above
    resolved = device_mod.resolve_device(settings.device, settings.device_module)
    if not resolved.available and settings.strict:
        raise pytest.UsageError(f"flagos: {resolved.unavailable_reason} (--flagos-strict)")
    expectations = expectations_mod.load(settings.expectations) if settings.expectations else None
    _apply_worker_settings(settings)
    profiles.register_profiles()
    profile = profiles.load_default_profile(chosen_profile)
    profiles.register_torch_with_hypothesis(resolved.type)

    current = state.FlagosSession(settings, resolved, profile, expectations)
    current.capabilities()  # now, so a vendor's bad manifest is a usage error too
    state.start(config, current)
    config.pluginmanager.register(requirements.RequirementsPlugin(), "flagos-requirements")
    if settings.report and not _is_xdist_worker(config):
        from .report import ReportCollector

        # under xdist only the controller writes the report, from the workers' reports
        config.pluginmanager.register(ReportCollector(settings.report, current, config), "flagos-report")


def _check_output_paths(config: pytest.Config, settings: options.Settings) -> None:
    """A report or repro path that cannot be written, or would overwrite an input, is a
    usage error now rather than a traceback after the run."""
    if not settings.report and not settings.repro_dir:
        return
    from . import output_paths

    inputs = output_paths.run_inputs(config, settings.expectations)
    if settings.repro_dir:
        output_paths.check_repro_dir(settings.repro_dir, inputs)
    if settings.report:
        repro_dir = [(settings.repro_dir, "the repro directory (--flagos-repro-dir)")]
        output_paths.check_report_path(settings.report, inputs + repro_dir)


def _apply_worker_settings(settings: options.Settings) -> None:
    if settings.compile_threads is None and settings.worker_start is None:
        return
    from ._torch_compat import inductor_config

    inductor = inductor_config()
    if settings.compile_threads is not None:
        inductor.compile_threads = settings.compile_threads
    if settings.worker_start is not None:
        inductor.worker_start_method = settings.worker_start


class FlagosPlugin:
    """The hooks that need the run's state (session.current(config), in config.stash).

    Registered on the config as PLUGIN_NAME at pytest_load_initial_conftests, before the
    conftests, so a conftest's hooks run before these as they did before the module's (a
    marker a conftest adds in pytest_collection_modifyitems is seen here). Without a device
    the run has no state and every hook returns at once.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._previous_active: weakref.ReferenceType[pytest.Config] | None = None  # see state.activate

    def _current(self) -> state.FlagosSession | None:
        return state.current(self.config)

    def activate(self) -> None:
        """At pytest_configure: make this run the one state.current() falls back to."""
        self._previous_active = state.activate(self.config)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        state.stop(config)
        state.deactivate(config, self._previous_active)
        self._previous_active = None

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        current = self._current()
        if current is None:
            return None
        from .header import header_lines

        return header_lines(current)

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        current = self._current()
        if current is None:
            return
        from . import expectations as expectations_mod
        from .report import PROP_AREA, PROP_EXPECTATION

        skip_all = None
        if not current.device.available:
            skip_all = pytest.mark.skip(reason=f"flagos: {current.device.unavailable_reason}")
        for item in items:
            item.user_properties.append((PROP_AREA, areas.area_of(item)))
            if current.expectations is not None:
                entry = expectations_mod.apply(item, current.expectations, current.settings.strict)
                if entry is not None:
                    item.user_properties.append((PROP_EXPECTATION, f"{entry.status}: {entry.reason}"))
            if skip_all is not None:
                item.add_marker(skip_all)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        current = self._current()
        if current is None or not items:
            return
        config = items[0].config
        config.stash.setdefault(_DESELECTED_KEY, []).extend(item.nodeid for item in items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        current = self._current()
        if current is None or current.expectations is None:
            return
        config = session.config
        # every xdist worker collects the same tests: let one of them warn
        if _is_xdist_worker(config) and config.workerinput.get("workerid") != "gw0":  # type: ignore[attr-defined]  # xdist sets it
            return
        nodeids = [item.nodeid for item in session.items]
        deselected = config.stash.get(_DESELECTED_KEY, [])
        nodeids += deselected
        from .expectations import stale_warning

        for entry in current.expectations.stale(nodeids, config.rootpath):
            warnings.warn(stale_warning(current.expectations, entry), stacklevel=1)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        current = self._current()
        if current is not None:
            current.current_nodeid = item.nodeid  # names repro scripts after the test
        try:
            return (yield)
        finally:
            if current is not None:
                current.current_nodeid = None

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        current = self._current()
        if current is None:
            return
        from .report import PROP_EXPECTATION

        xpassed = [
            r for r in terminalreporter.stats.get("xpassed", []) if PROP_EXPECTATION in dict(r.user_properties)
        ]  # xfail from the file, not a marker
        if xpassed:
            terminalreporter.section("flagos: expected failures that passed")
            file = current.expectations.file if current.expectations else "the expectations file"
            for report in xpassed:
                terminalreporter.line(f"XPASS {report.nodeid} -- remove its entry from {file}")


def _plugin_for(config: pytest.Config) -> FlagosPlugin:
    """The config's FlagosPlugin, registered now if it is not yet (the plugin module was
    registered after pytest_load_initial_conftests, e.g. from a conftest's pytest_plugins)."""
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if plugin is None:
        plugin = FlagosPlugin(config)
        config.pluginmanager.register(plugin, PLUGIN_NAME)
    assert isinstance(plugin, FlagosPlugin)
    return plugin
