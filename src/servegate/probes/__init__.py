"""Probe suites as data (YAML shipped in the package) and the checks that judge a completion."""

from servegate.probes.assertions import Assertion, ExpectedCall
from servegate.probes.checker import CHECKS, check, check_probe
from servegate.probes.loader import SuiteError, default_suite, load_suite, parse_suite
from servegate.probes.models import CATEGORIES, Probe, Suite
from servegate.probes.outcome import AssertionOutcome, ProbeOutcome

__all__ = [
    "CATEGORIES",
    "CHECKS",
    "Assertion",
    "AssertionOutcome",
    "ExpectedCall",
    "Probe",
    "ProbeOutcome",
    "Suite",
    "SuiteError",
    "check",
    "check_probe",
    "default_suite",
    "load_suite",
    "parse_suite",
]
