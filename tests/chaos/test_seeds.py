import pytest

from tests.chaos.seeds import DEFAULT_SEEDS, SEED_ENV, ChaosSeeds, chaos_seeds


def test_unset_or_empty_is_the_run_ci_has_always_made() -> None:
    assert chaos_seeds({}) == chaos_seeds({SEED_ENV: " "}) == ChaosSeeds(provider=3, schedule=5, driver=11)


def test_a_seed_names_one_other_run() -> None:
    eleven = chaos_seeds({SEED_ENV: "11"})
    assert eleven == chaos_seeds({SEED_ENV: "11"}) != chaos_seeds({SEED_ENV: "12"})
    assert eleven != DEFAULT_SEEDS and len({eleven.provider, eleven.schedule, eleven.driver}) == 3


def test_a_seed_that_is_not_an_integer_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid literal for int"):
        chaos_seeds({SEED_ENV: "eleven"})
