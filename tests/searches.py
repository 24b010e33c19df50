"""Helpers for the search tests: a study in the state a test needs."""
import warnings


def lost_trial(url):
    """A study ``linear`` in the RDB storage ``url`` with one RUNNING trial whose
    worker is on another host (its lock out of reach), its heartbeat recorded
    now: the test then moves that heartbeat into the past."""
    import optuna
    from mindexp.search.study import open_storage
    study = optuna.create_study(study_name="linear", storage=open_storage(url))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna: heartbeats are meant for optimize()
        lost = study.ask()
    lost.set_user_attr("host", "another-machine")
    study._storage.record_heartbeat(lost._trial_id)
    return study
