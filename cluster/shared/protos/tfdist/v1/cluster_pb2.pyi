from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobSpec(_message.Message):
    __slots__ = ("priority", "working_dir", "startup_timeout", "submission_id", "mode_reason", "config", "experiment_id", "trial")
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    STARTUP_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SUBMISSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_REASON_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIAL_FIELD_NUMBER: _ClassVar[int]
    priority: int
    working_dir: str
    startup_timeout: float
    submission_id: str
    mode_reason: str
    config: JobConfig
    experiment_id: str
    trial: int
    def __init__(self, priority: _Optional[int] = ..., working_dir: _Optional[str] = ..., startup_timeout: _Optional[float] = ..., submission_id: _Optional[str] = ..., mode_reason: _Optional[str] = ..., config: _Optional[_Union[JobConfig, _Mapping]] = ..., experiment_id: _Optional[str] = ..., trial: _Optional[int] = ...) -> None: ...

class JobConfig(_message.Message):
    __slots__ = ("name", "entrypoint", "slots_per_trial", "distribution_mode", "num_ps", "evaluator", "gradient_compression", "auto_tune_tensor_fusion", "average_training_metrics", "aggregation_frequency", "step_timeout", "hyperparameters", "environment_variables", "max_restarts", "checkpoint_storage", "kubernetes", "searcher", "seed", "user_data", "determined", "diagnose")
    class EnvironmentVariablesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    SLOTS_PER_TRIAL_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTION_MODE_FIELD_NUMBER: _ClassVar[int]
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    EVALUATOR_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    AUTO_TUNE_TENSOR_FUSION_FIELD_NUMBER: _ClassVar[int]
    AVERAGE_TRAINING_METRICS_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    STEP_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    HYPERPARAMETERS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_VARIABLES_FIELD_NUMBER: _ClassVar[int]
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STORAGE_FIELD_NUMBER: _ClassVar[int]
    KUBERNETES_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    DETERMINED_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSE_FIELD_NUMBER: _ClassVar[int]
    name: str
    entrypoint: _containers.RepeatedScalarFieldContainer[str]
    slots_per_trial: int
    distribution_mode: str
    num_ps: int
    evaluator: bool
    gradient_compression: str
    auto_tune_tensor_fusion: bool
    average_training_metrics: bool
    aggregation_frequency: int
    step_timeout: float
    hyperparameters: ValueMap
    environment_variables: _containers.ScalarMap[str, str]
    max_restarts: int
    checkpoint_storage: str
    kubernetes: ValueMap
    searcher: ValueMap
    seed: int
    user_data: ValueMap
    determined: ValueMap
    diagnose: ValueMap
    def __init__(self, name: _Optional[str] = ..., entrypoint: _Optional[_Iterable[str]] = ..., slots_per_trial: _Optional[int] = ..., distribution_mode: _Optional[str] = ..., num_ps: _Optional[int] = ..., evaluator: _Optional[bool] = ..., gradient_compression: _Optional[str] = ..., auto_tune_tensor_fusion: _Optional[bool] = ..., average_training_metrics: _Optional[bool] = ..., aggregation_frequency: _Optional[int] = ..., step_timeout: _Optional[float] = ..., hyperparameters: _Optional[_Union[ValueMap, _Mapping]] = ..., environment_variables: _Optional[_Mapping[str, str]] = ..., max_restarts: _Optional[int] = ..., checkpoint_storage: _Optional[str] = ..., kubernetes: _Optional[_Union[ValueMap, _Mapping]] = ..., searcher: _Optional[_Union[ValueMap, _Mapping]] = ..., seed: _Optional[int] = ..., user_data: _Optional[_Union[ValueMap, _Mapping]] = ..., determined: _Optional[_Union[ValueMap, _Mapping]] = ..., diagnose: _Optional[_Union[ValueMap, _Mapping]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("null_value", "bool_value", "int_value", "float_value", "string_value", "list_value", "map_value")
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAP_VALUE_FIELD_NUMBER: _ClassVar[int]
    null_value: bool
    bool_value: bool
    int_value: int
    float_value: float
    string_value: str
    list_value: ValueList
    map_value: ValueMap
    def __init__(self, null_value: _Optional[bool] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., float_value: _Optional[float] = ..., string_value: _Optional[str] = ..., list_value: _Optional[_Union[ValueList, _Mapping]] = ..., map_value: _Optional[_Union[ValueMap, _Mapping]] = ...) -> None: ...

class ValueList(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, items: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class ValueMap(_message.Message):
    __slots__ = ("fields",)
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.MessageMap[str, Value]
    def __init__(self, fields: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("agent", "node_rank", "slots", "address", "ports", "gpus", "state")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    agent: str
    node_rank: int
    slots: int
    address: str
    ports: _containers.RepeatedScalarFieldContainer[int]
    gpus: _containers.RepeatedScalarFieldContainer[int]
    state: str
    def __init__(self, agent: _Optional[str] = ..., node_rank: _Optional[int] = ..., slots: _Optional[int] = ..., address: _Optional[str] = ..., ports: _Optional[_Iterable[int]] = ..., gpus: _Optional[_Iterable[int]] = ..., state: _Optional[str] = ...) -> None: ...

class WorkerExit(_message.Message):
    __slots__ = ("rank", "agent", "exit_code", "last_lines", "reason", "tolerated", "attempt")
    RANK_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    LAST_LINES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOLERATED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    rank: int
    agent: str
    exit_code: int
    last_lines: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    tolerated: bool
    attempt: int
    def __init__(self, rank: _Optional[int] = ..., agent: _Optional[str] = ..., exit_code: _Optional[int] = ..., last_lines: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., tolerated: _Optional[bool] = ..., attempt: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "spec", "state", "submitted_at", "started_at", "ended_at", "placement", "waiting_reason", "message", "exit_code", "exits", "latest_metrics", "failed_rank", "attempt", "restarts", "latest_checkpoint", "owner", "throughput")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXITS_FIELD_NUMBER: _ClassVar[int]
    LATEST_METRICS_FIELD_NUMBER: _ClassVar[int]
    FAILED_RANK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: JobSpec
    state: str
    submitted_at: float
    started_at: float
    ended_at: float
    placement: _containers.RepeatedCompositeFieldContainer[Placement]
    waiting_reason: str
    message: str
    exit_code: int
    exits: _containers.RepeatedCompositeFieldContainer[WorkerExit]
    latest_metrics: _containers.RepeatedCompositeFieldContainer[Metric]
    failed_rank: int
    attempt: int
    restarts: int
    latest_checkpoint: Checkpoint
    owner: str
    throughput: Throughput
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[str] = ..., submitted_at: _Optional[float] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., placement: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ..., waiting_reason: _Optional[str] = ..., message: _Optional[str] = ..., exit_code: _Optional[int] = ..., exits: _Optional[_Iterable[_Union[WorkerExit, _Mapping]]] = ..., latest_metrics: _Optional[_Iterable[_Union[Metric, _Mapping]]] = ..., failed_rank: _Optional[int] = ..., attempt: _Optional[int] = ..., restarts: _Optional[int] = ..., latest_checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., owner: _Optional[str] = ..., throughput: _Optional[_Union[Throughput, _Mapping]] = ...) -> None: ...

class Throughput(_message.Message):
    __slots__ = ("steps_per_second", "examples_per_second", "time")
    STEPS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    steps_per_second: float
    examples_per_second: float
    time: float
    def __init__(self, steps_per_second: _Optional[float] = ..., examples_per_second: _Optional[float] = ..., time: _Optional[float] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("step", "path", "attempt", "time")
    STEP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    step: int
    path: str
    attempt: int
    time: float
    def __init__(self, step: _Optional[int] = ..., path: _Optional[str] = ..., attempt: _Optional[int] = ..., time: _Optional[float] = ...) -> None: ...

class Metric(_message.Message):
    __slots__ = ("rank", "step", "name", "value", "time", "note")
    RANK_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    step: int
    name: str
    value: float
    time: float
    note: str
    def __init__(self, rank: _Optional[int] = ..., step: _Optional[int] = ..., name: _Optional[str] = ..., value: _Optional[float] = ..., time: _Optional[float] = ..., note: _Optional[str] = ...) -> None: ...

class GetMetricsRequest(_message.Message):
    __slots__ = ("job_id", "name")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class GetMetricsResponse(_message.Message):
    __slots__ = ("job_id", "metrics")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    metrics: _containers.RepeatedCompositeFieldContainer[Metric]
    def __init__(self, job_id: _Optional[str] = ..., metrics: _Optional[_Iterable[_Union[Metric, _Mapping]]] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id", "state")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: str
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "states", "summary")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[str]
    summary: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[str]] = ..., summary: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "total")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    total: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class Trial(_message.Message):
    __slots__ = ("number", "job_id", "state", "hparams", "latest", "best", "length", "rung", "waiting", "why", "checkpoint", "checkpoint_step")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HPARAMS_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    RUNG_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    number: int
    job_id: str
    state: str
    hparams: ValueMap
    latest: float
    best: float
    length: int
    rung: int
    waiting: bool
    why: str
    checkpoint: str
    checkpoint_step: int
    def __init__(self, number: _Optional[int] = ..., job_id: _Optional[str] = ..., state: _Optional[str] = ..., hparams: _Optional[_Union[ValueMap, _Mapping]] = ..., latest: _Optional[float] = ..., best: _Optional[float] = ..., length: _Optional[int] = ..., rung: _Optional[int] = ..., waiting: _Optional[bool] = ..., why: _Optional[str] = ..., checkpoint: _Optional[str] = ..., checkpoint_step: _Optional[int] = ...) -> None: ...

class Experiment(_message.Message):
    __slots__ = ("id", "name", "state", "searcher", "metric", "smaller_is_better", "created_at", "ended_at", "message", "trials", "best_trial", "max_trials", "owner", "seed", "length_unit", "rung_lengths", "trials_made")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SEARCHER_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    SMALLER_IS_BETTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRIALS_FIELD_NUMBER: _ClassVar[int]
    BEST_TRIAL_FIELD_NUMBER: _ClassVar[int]
    MAX_TRIALS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LENGTH_UNIT_FIELD_NUMBER: _ClassVar[int]
    RUNG_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    TRIALS_MADE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    state: str
    searcher: str
    metric: str
    smaller_is_better: bool
    created_at: float
    ended_at: float
    message: str
    trials: _containers.RepeatedCompositeFieldContainer[Trial]
    best_trial: int
    max_trials: int
    owner: str
    seed: int
    length_unit: str
    rung_lengths: _containers.RepeatedScalarFieldContainer[int]
    trials_made: int
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[str] = ..., searcher: _Optional[str] = ..., metric: _Optional[str] = ..., smaller_is_better: _Optional[bool] = ..., created_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., message: _Optional[str] = ..., trials: _Optional[_Iterable[_Union[Trial, _Mapping]]] = ..., best_trial: _Optional[int] = ..., max_trials: _Optional[int] = ..., owner: _Optional[str] = ..., seed: _Optional[int] = ..., length_unit: _Optional[str] = ..., rung_lengths: _Optional[_Iterable[int]] = ..., trials_made: _Optional[int] = ...) -> None: ...

class GetExperimentRequest(_message.Message):
    __slots__ = ("experiment_id",)
    EXPERIMENT_ID_FIELD_NUMBER: _ClassVar[int]
    experiment_id: str
    def __init__(self, experiment_id: _Optional[str] = ...) -> None: ...

class ListExperimentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListExperimentsResponse(_message.Message):
    __slots__ = ("experiments",)
    EXPERIMENTS_FIELD_NUMBER: _ClassVar[int]
    experiments: _containers.RepeatedCompositeFieldContainer[Experiment]
    def __init__(self, experiments: _Optional[_Iterable[_Union[Experiment, _Mapping]]] = ...) -> None: ...

class IssueCredentialRequest(_message.Message):
    __slots__ = ("kind", "name", "days")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DAYS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    days: float
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., days: _Optional[float] = ...) -> None: ...

class IssueCredentialResponse(_message.Message):
    __slots__ = ("credential_json",)
    CREDENTIAL_JSON_FIELD_NUMBER: _ClassVar[int]
    credential_json: str
    def __init__(self, credential_json: _Optional[str] = ...) -> None: ...

class ListCredentialsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IssuedCredential(_message.Message):
    __slots__ = ("kind", "name", "issued_at", "expires_at", "issued_by", "revoked")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    ISSUED_BY_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    issued_at: float
    expires_at: float
    issued_by: str
    revoked: bool
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., issued_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., issued_by: _Optional[str] = ..., revoked: _Optional[bool] = ...) -> None: ...

class RevokedName(_message.Message):
    __slots__ = ("kind", "name", "revoked_at")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    revoked_at: float
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., revoked_at: _Optional[float] = ...) -> None: ...

class ListCredentialsResponse(_message.Message):
    __slots__ = ("issued", "revoked")
    ISSUED_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    issued: _containers.RepeatedCompositeFieldContainer[IssuedCredential]
    revoked: _containers.RepeatedCompositeFieldContainer[RevokedName]
    def __init__(self, issued: _Optional[_Iterable[_Union[IssuedCredential, _Mapping]]] = ..., revoked: _Optional[_Iterable[_Union[RevokedName, _Mapping]]] = ...) -> None: ...

class RevokeCredentialRequest(_message.Message):
    __slots__ = ("kind", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class RevokeCredentialResponse(_message.Message):
    __slots__ = ("revoked", "revoked_at")
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    revoked: int
    revoked_at: float
    def __init__(self, revoked: _Optional[int] = ..., revoked_at: _Optional[float] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...

class PreemptJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class PreemptJobResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...

class ResumeJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ResumeJobResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("seq", "rank", "stream", "text", "time")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    seq: int
    rank: int
    stream: str
    text: str
    time: float
    def __init__(self, seq: _Optional[int] = ..., rank: _Optional[int] = ..., stream: _Optional[str] = ..., text: _Optional[str] = ..., time: _Optional[float] = ...) -> None: ...

class GetLogsRequest(_message.Message):
    __slots__ = ("job_id", "after_seq", "rank", "limit", "wait_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    after_seq: int
    rank: int
    limit: int
    wait_ms: int
    def __init__(self, job_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., rank: _Optional[int] = ..., limit: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class GetLogsResponse(_message.Message):
    __slots__ = ("lines", "job_ended")
    LINES_FIELD_NUMBER: _ClassVar[int]
    JOB_ENDED_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[LogLine]
    job_ended: bool
    def __init__(self, lines: _Optional[_Iterable[_Union[LogLine, _Mapping]]] = ..., job_ended: _Optional[bool] = ...) -> None: ...

class Address(_message.Message):
    __slots__ = ("ip", "prefix_len", "interface")
    IP_FIELD_NUMBER: _ClassVar[int]
    PREFIX_LEN_FIELD_NUMBER: _ClassVar[int]
    INTERFACE_FIELD_NUMBER: _ClassVar[int]
    ip: str
    prefix_len: int
    interface: str
    def __init__(self, ip: _Optional[str] = ..., prefix_len: _Optional[int] = ..., interface: _Optional[str] = ...) -> None: ...

class Gpu(_message.Message):
    __slots__ = ("index", "uuid", "name")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    name: str
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class AgentInfo(_message.Message):
    __slots__ = ("name", "slots", "gpu", "addresses", "state", "last_heartbeat", "jobs", "free_slots", "gpus", "free_gpus", "usage", "metrics_address", "liveness")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    FREE_GPUS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LIVENESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    slots: int
    gpu: bool
    addresses: _containers.RepeatedCompositeFieldContainer[Address]
    state: str
    last_heartbeat: float
    jobs: _containers.RepeatedScalarFieldContainer[str]
    free_slots: int
    gpus: _containers.RepeatedCompositeFieldContainer[Gpu]
    free_gpus: _containers.RepeatedScalarFieldContainer[int]
    usage: NodeUsage
    metrics_address: str
    liveness: str
    def __init__(self, name: _Optional[str] = ..., slots: _Optional[int] = ..., gpu: _Optional[bool] = ..., addresses: _Optional[_Iterable[_Union[Address, _Mapping]]] = ..., state: _Optional[str] = ..., last_heartbeat: _Optional[float] = ..., jobs: _Optional[_Iterable[str]] = ..., free_slots: _Optional[int] = ..., gpus: _Optional[_Iterable[_Union[Gpu, _Mapping]]] = ..., free_gpus: _Optional[_Iterable[int]] = ..., usage: _Optional[_Union[NodeUsage, _Mapping]] = ..., metrics_address: _Optional[str] = ..., liveness: _Optional[str] = ...) -> None: ...

class NodeUsage(_message.Message):
    __slots__ = ("time", "gpus", "jobs")
    TIME_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    time: float
    gpus: _containers.RepeatedCompositeFieldContainer[GpuUsage]
    jobs: _containers.RepeatedCompositeFieldContainer[JobUsage]
    def __init__(self, time: _Optional[float] = ..., gpus: _Optional[_Iterable[_Union[GpuUsage, _Mapping]]] = ..., jobs: _Optional[_Iterable[_Union[JobUsage, _Mapping]]] = ...) -> None: ...

class GpuUsage(_message.Message):
    __slots__ = ("index", "utilization", "memory_used_bytes", "memory_total_bytes")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    index: int
    utilization: float
    memory_used_bytes: int
    memory_total_bytes: int
    def __init__(self, index: _Optional[int] = ..., utilization: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ...) -> None: ...

class JobUsage(_message.Message):
    __slots__ = ("job_id", "cpu_seconds", "rss_bytes", "processes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    cpu_seconds: float
    rss_bytes: int
    processes: int
    def __init__(self, job_id: _Optional[str] = ..., cpu_seconds: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., processes: _Optional[int] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentInfo]
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentInfo, _Mapping]]] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("agent", "running", "leased_jobs", "metrics_csr", "beacons")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    LEASED_JOBS_FIELD_NUMBER: _ClassVar[int]
    METRICS_CSR_FIELD_NUMBER: _ClassVar[int]
    BEACONS_FIELD_NUMBER: _ClassVar[int]
    agent: AgentInfo
    running: _containers.RepeatedCompositeFieldContainer[RunningTask]
    leased_jobs: _containers.RepeatedScalarFieldContainer[str]
    metrics_csr: bytes
    beacons: bool
    def __init__(self, agent: _Optional[_Union[AgentInfo, _Mapping]] = ..., running: _Optional[_Iterable[_Union[RunningTask, _Mapping]]] = ..., leased_jobs: _Optional[_Iterable[str]] = ..., metrics_csr: _Optional[bytes] = ..., beacons: _Optional[bool] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("heartbeat_interval", "metrics_certificate", "beacon_port", "beacon_key", "beacon_interval", "beacon_nonce")
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    METRICS_CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    BEACON_PORT_FIELD_NUMBER: _ClassVar[int]
    BEACON_KEY_FIELD_NUMBER: _ClassVar[int]
    BEACON_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    BEACON_NONCE_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval: float
    metrics_certificate: bytes
    beacon_port: int
    beacon_key: bytes
    beacon_interval: float
    beacon_nonce: bytes
    def __init__(self, heartbeat_interval: _Optional[float] = ..., metrics_certificate: _Optional[bytes] = ..., beacon_port: _Optional[int] = ..., beacon_key: _Optional[bytes] = ..., beacon_interval: _Optional[float] = ..., beacon_nonce: _Optional[bytes] = ...) -> None: ...

class RunningTask(_message.Message):
    __slots__ = ("job_id", "ranks", "joined_ranks", "progress", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    JOINED_RANKS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    joined_ranks: _containers.RepeatedScalarFieldContainer[int]
    progress: _containers.RepeatedCompositeFieldContainer[RankProgress]
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ..., joined_ranks: _Optional[_Iterable[int]] = ..., progress: _Optional[_Iterable[_Union[RankProgress, _Mapping]]] = ..., attempt: _Optional[int] = ...) -> None: ...

class RankProgress(_message.Message):
    __slots__ = ("rank", "step", "age")
    RANK_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    AGE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    step: int
    age: float
    def __init__(self, rank: _Optional[int] = ..., step: _Optional[int] = ..., age: _Optional[float] = ...) -> None: ...

class PortCheck(_message.Message):
    __slots__ = ("job_id", "ports", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    ports: _containers.RepeatedScalarFieldContainer[int]
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., ports: _Optional[_Iterable[int]] = ..., attempt: _Optional[int] = ...) -> None: ...

class WorkerProcess(_message.Message):
    __slots__ = ("rank", "command", "env", "port", "gpus", "expendable", "node_rank", "local_rank", "local_size", "replicas", "role")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RANK_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    EXPENDABLE_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    port: int
    gpus: _containers.RepeatedScalarFieldContainer[int]
    expendable: bool
    node_rank: int
    local_rank: int
    local_size: int
    replicas: int
    role: str
    def __init__(self, rank: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., port: _Optional[int] = ..., gpus: _Optional[_Iterable[int]] = ..., expendable: _Optional[bool] = ..., node_rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., local_size: _Optional[int] = ..., replicas: _Optional[int] = ..., role: _Optional[str] = ...) -> None: ...

class StartTask(_message.Message):
    __slots__ = ("job_id", "working_dir", "workers", "startup_timeout", "failure_grace", "store_port", "attempt", "store_secret")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    STARTUP_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_GRACE_FIELD_NUMBER: _ClassVar[int]
    STORE_PORT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STORE_SECRET_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    working_dir: str
    workers: _containers.RepeatedCompositeFieldContainer[WorkerProcess]
    startup_timeout: float
    failure_grace: float
    store_port: int
    attempt: int
    store_secret: str
    def __init__(self, job_id: _Optional[str] = ..., working_dir: _Optional[str] = ..., workers: _Optional[_Iterable[_Union[WorkerProcess, _Mapping]]] = ..., startup_timeout: _Optional[float] = ..., failure_grace: _Optional[float] = ..., store_port: _Optional[int] = ..., attempt: _Optional[int] = ..., store_secret: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("agent", "running", "port_results", "leased_jobs", "probe_results", "usage", "beacon_nonce")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    PORT_RESULTS_FIELD_NUMBER: _ClassVar[int]
    LEASED_JOBS_FIELD_NUMBER: _ClassVar[int]
    PROBE_RESULTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    BEACON_NONCE_FIELD_NUMBER: _ClassVar[int]
    agent: str
    running: _containers.RepeatedCompositeFieldContainer[RunningTask]
    port_results: _containers.RepeatedCompositeFieldContainer[PortCheckResult]
    leased_jobs: _containers.RepeatedScalarFieldContainer[str]
    probe_results: _containers.RepeatedCompositeFieldContainer[ProbeResult]
    usage: NodeUsage
    beacon_nonce: bytes
    def __init__(self, agent: _Optional[str] = ..., running: _Optional[_Iterable[_Union[RunningTask, _Mapping]]] = ..., port_results: _Optional[_Iterable[_Union[PortCheckResult, _Mapping]]] = ..., leased_jobs: _Optional[_Iterable[str]] = ..., probe_results: _Optional[_Iterable[_Union[ProbeResult, _Mapping]]] = ..., usage: _Optional[_Union[NodeUsage, _Mapping]] = ..., beacon_nonce: _Optional[bytes] = ...) -> None: ...

class CheckScrapeTokenRequest(_message.Message):
    __slots__ = ("agent", "token")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    agent: str
    token: str
    def __init__(self, agent: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class CheckScrapeTokenResponse(_message.Message):
    __slots__ = ("kind", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ProbeTarget(_message.Message):
    __slots__ = ("peer", "address", "port")
    PEER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    peer: str
    address: str
    port: int
    def __init__(self, peer: _Optional[str] = ..., address: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class Probe(_message.Message):
    __slots__ = ("job_id", "targets", "timeout")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    targets: _containers.RepeatedCompositeFieldContainer[ProbeTarget]
    timeout: float
    def __init__(self, job_id: _Optional[str] = ..., targets: _Optional[_Iterable[_Union[ProbeTarget, _Mapping]]] = ..., timeout: _Optional[float] = ...) -> None: ...

class ProbeFailure(_message.Message):
    __slots__ = ("target", "error")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    target: ProbeTarget
    error: str
    def __init__(self, target: _Optional[_Union[ProbeTarget, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class ProbeResult(_message.Message):
    __slots__ = ("job_id", "failures")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    failures: _containers.RepeatedCompositeFieldContainer[ProbeFailure]
    def __init__(self, job_id: _Optional[str] = ..., failures: _Optional[_Iterable[_Union[ProbeFailure, _Mapping]]] = ...) -> None: ...

class PortCheckResult(_message.Message):
    __slots__ = ("job_id", "busy_ports")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    BUSY_PORTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    busy_ports: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_id: _Optional[str] = ..., busy_ports: _Optional[_Iterable[int]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("reregister", "check_ports", "start", "stop_jobs", "heartbeat_interval", "probe", "stop_grace", "dump_stacks", "preempt", "work_version", "beacon_port")
    class StopGraceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    CHECK_PORTS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_JOBS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    STOP_GRACE_FIELD_NUMBER: _ClassVar[int]
    DUMP_STACKS_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_FIELD_NUMBER: _ClassVar[int]
    WORK_VERSION_FIELD_NUMBER: _ClassVar[int]
    BEACON_PORT_FIELD_NUMBER: _ClassVar[int]
    reregister: bool
    check_ports: _containers.RepeatedCompositeFieldContainer[PortCheck]
    start: _containers.RepeatedCompositeFieldContainer[StartTask]
    stop_jobs: _containers.RepeatedScalarFieldContainer[str]
    heartbeat_interval: float
    probe: _containers.RepeatedCompositeFieldContainer[Probe]
    stop_grace: _containers.ScalarMap[str, float]
    dump_stacks: _containers.RepeatedScalarFieldContainer[str]
    preempt: _containers.RepeatedScalarFieldContainer[str]
    work_version: int
    beacon_port: int
    def __init__(self, reregister: _Optional[bool] = ..., check_ports: _Optional[_Iterable[_Union[PortCheck, _Mapping]]] = ..., start: _Optional[_Iterable[_Union[StartTask, _Mapping]]] = ..., stop_jobs: _Optional[_Iterable[str]] = ..., heartbeat_interval: _Optional[float] = ..., probe: _Optional[_Iterable[_Union[Probe, _Mapping]]] = ..., stop_grace: _Optional[_Mapping[str, float]] = ..., dump_stacks: _Optional[_Iterable[str]] = ..., preempt: _Optional[_Iterable[str]] = ..., work_version: _Optional[int] = ..., beacon_port: _Optional[int] = ...) -> None: ...

class WaitForWorkRequest(_message.Message):
    __slots__ = ("agent", "seen", "wait_ms")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    SEEN_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    agent: str
    seen: int
    wait_ms: int
    def __init__(self, agent: _Optional[str] = ..., seen: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class WaitForWorkResponse(_message.Message):
    __slots__ = ("version", "held")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    version: int
    held: bool
    def __init__(self, version: _Optional[int] = ..., held: _Optional[bool] = ...) -> None: ...

class ReportExitRequest(_message.Message):
    __slots__ = ("agent", "job_id", "exit")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    agent: str
    job_id: str
    exit: WorkerExit
    def __init__(self, agent: _Optional[str] = ..., job_id: _Optional[str] = ..., exit: _Optional[_Union[WorkerExit, _Mapping]] = ...) -> None: ...

class ReportExitResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PushLogsRequest(_message.Message):
    __slots__ = ("agent", "job_id", "lines", "source", "first_seq")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    agent: str
    job_id: str
    lines: _containers.RepeatedCompositeFieldContainer[LogLine]
    source: str
    first_seq: int
    def __init__(self, agent: _Optional[str] = ..., job_id: _Optional[str] = ..., lines: _Optional[_Iterable[_Union[LogLine, _Mapping]]] = ..., source: _Optional[str] = ..., first_seq: _Optional[int] = ...) -> None: ...

class PushLogsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportMetricsRequest(_message.Message):
    __slots__ = ("agent", "job_id", "metrics", "source", "first_seq")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    agent: str
    job_id: str
    metrics: _containers.RepeatedCompositeFieldContainer[Metric]
    source: str
    first_seq: int
    def __init__(self, agent: _Optional[str] = ..., job_id: _Optional[str] = ..., metrics: _Optional[_Iterable[_Union[Metric, _Mapping]]] = ..., source: _Optional[str] = ..., first_seq: _Optional[int] = ...) -> None: ...

class ReportMetricsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
