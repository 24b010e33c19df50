"""The names shared by a run that streams to MLflow (``mindexp.train.mlflow_stream``)
and its live sender (``mindexp.analysis.mlflow_live``), which import nothing of each other."""

ENV_RUN_DIR = "MINDEXP_MLFLOW_RUN_DIR"   # the sender's run folder
ENV_URI = "MINDEXP_MLFLOW_URI"           # the tracking URI (may carry a password: never argv)
ENV_PARENT = "MINDEXP_MLFLOW_PARENT"     # the MLflow run of the sweep or study the run is part of
ENV_POLL_S = "MINDEXP_MLFLOW_POLL_S"     # seconds between the sender's passes
META_KEY = "mlflow"                      # run.json: {masked tracking URI: MLflow run id}
SENDER_MODULE = "mindexp.analysis.mlflow_live"
