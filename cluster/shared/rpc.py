"""A small client for the coordinator: auth metadata, timeouts, and gRPC errors turned
into one clear line."""

from __future__ import annotations

import time

import grpc

from cluster.shared.auth import call_metadata, channel
from cluster.shared.credentials import Credential
from cluster.shared.job_pages import JOBS_PAGE, JobList, walk_pages  # noqa: F401 (JOBS_PAGE, JobList: re-exported)
from cluster.shared.protos.tfdist.v1 import cluster_pb2 as pb
from cluster.shared.protos.tfdist.v1 import cluster_pb2_grpc as pb_grpc
from tfdist.errors import TfdistError

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
TRUST_FAILURES = ("tls handshake failed", "ssl_error_ssl", "certificate", "verif", "peer name")


class ClientError(TfdistError):
    def __init__(self, message: str, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.code = code
        if code is not None:  # the coordinator's refusal of a bad request is the user's mistake
            self.grpc_code = code.name
            self.exit_code = 2 if code == grpc.StatusCode.INVALID_ARGUMENT else 1


def describe_rpc_error(address: str, e: grpc.RpcError) -> ClientError:
    code = e.code()
    details = (e.details() or "").lower()
    # A refused certificate: "Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: ...CERTIFICATE_VERIFY_
    # FAILED", or a name the certificate lacks. Not "Handshake read failed (Socket closed)": a server going down
    # (a coordinator's restart) mid-handshake, which is retried like any unreachable server.
    if code == grpc.StatusCode.UNAVAILABLE and any(w in details for w in TRUST_FAILURES):
        return ClientError(f"the server at {address} did not prove it is the coordinator your credential trusts "
                           "(TLS verification failed); nothing was sent. Check --coordinator and --credentials "
                           "(a coordinator started with --insecure-plaintext needs a plaintext credential)",
                           grpc.StatusCode.UNAUTHENTICATED)  # not retried: the same server would fail again
    if code == grpc.StatusCode.UNAVAILABLE:
        return ClientError(f"cannot reach the coordinator at {address}: is `tfdist coordinator` running there? "
                           "(set --coordinator or TFDIST_COORDINATOR)", code)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ClientError(f"the coordinator at {address} did not answer in time", code)
    return ClientError(e.details() or str(code), code)


class Client:
    def __init__(self, address: str, credential: Credential, timeout: float = 10.0):
        self.address = address
        self.timeout = timeout
        self._metadata = call_metadata(credential)
        self.channel = channel(address, credential, [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                                     ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)])
        self.coordinator = pb_grpc.CoordinatorStub(self.channel)
        self.agents = pb_grpc.AgentServiceStub(self.channel)

    def call(self, method, request, timeout: float | None = None):
        try:
            return method(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise describe_rpc_error(self.address, e) from None

    def close(self) -> None:
        self.channel.close()

    # Convenience wrappers used by the CLI.
    def submit(self, spec: pb.JobSpec, retry_for: float = 30.0) -> str:
        """Submits; while the coordinator is unreachable (a restart), retries the same submission for
        up to `retry_for` seconds. The spec's submission id makes a retry the same job."""
        deadline = time.monotonic() + retry_for
        while True:
            try:
                return self.call(self.coordinator.SubmitJob, pb.SubmitJobRequest(spec=spec)).job_id
            except ClientError as e:
                if e.code not in RETRYABLE or not spec.submission_id or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def job(self, job_id: str) -> pb.Job:
        return self.call(self.coordinator.GetJob, pb.GetJobRequest(job_id=job_id))

    def jobs(self, states=(), limit: int = 0, summary: bool = False) -> JobList:
        """The jobs (in `states`: names), every one or the newest `limit`, oldest first (job_pages.py)."""
        return walk_pages(lambda request: self.call(self.coordinator.ListJobs, request), states, limit, summary,
                          f"the coordinator at {self.address}")

    def cancel(self, job_id: str) -> str:
        return self.call(self.coordinator.CancelJob, pb.CancelJobRequest(job_id=job_id)).state

    def preempt(self, job_id: str) -> str:
        return self.call(self.coordinator.PreemptJob, pb.PreemptJobRequest(job_id=job_id)).state

    def resume(self, job_id: str) -> str:
        return self.call(self.coordinator.ResumeJob, pb.ResumeJobRequest(job_id=job_id)).state

    def logs(self, job_id: str, after_seq: int = 0, rank: int = -1, limit: int = 1000,
             wait: float = 0.0) -> pb.GetLogsResponse:
        """With `wait`, the coordinator holds the call until there are new lines or the job ended."""
        return self.call(self.coordinator.GetLogs,
                         pb.GetLogsRequest(job_id=job_id, after_seq=after_seq, rank=rank, limit=limit,
                                           wait_ms=int(wait * 1000)), timeout=self.timeout + wait)

    def metrics(self, job_id: str, name: str = "") -> pb.GetMetricsResponse:
        return self.call(self.coordinator.GetMetrics, pb.GetMetricsRequest(job_id=job_id, name=name))

    def experiment(self, ref: str) -> pb.Experiment:
        return self.call(self.coordinator.GetExperiment, pb.GetExperimentRequest(experiment_id=ref))

    def experiments(self) -> list[pb.Experiment]:
        return list(self.call(self.coordinator.ListExperiments, pb.ListExperimentsRequest()).experiments)

    def list_agents(self) -> list[pb.AgentInfo]:
        return list(self.call(self.coordinator.ListAgents, pb.ListAgentsRequest()).agents)

    def issue_credential(self, kind: str, name: str, days: float = 0.0) -> str:
        """The credential file's JSON (an admin's call; days 0: the kind's default lifetime)."""
        return self.call(self.coordinator.IssueCredential,
                         pb.IssueCredentialRequest(kind=kind, name=name, days=days)).credential_json

    def list_credentials(self) -> pb.ListCredentialsResponse:
        return self.call(self.coordinator.ListCredentials, pb.ListCredentialsRequest())

    def revoke_credential(self, kind: str, name: str) -> pb.RevokeCredentialResponse:
        return self.call(self.coordinator.RevokeCredential, pb.RevokeCredentialRequest(kind=kind, name=name))
