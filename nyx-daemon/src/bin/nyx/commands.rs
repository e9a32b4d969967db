//! Each subcommand as a control-API call, its answer printed as text or JSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use nyx_daemon::control::pb;
use nyx_daemon::control::pb::control_client::ControlClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

use crate::output;
use crate::{CircuitAction, Cli, Command, ConfigAction, StreamAction};

/// Why a command failed, and its exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The daemon is not running (no socket, connection refused).
    NotRunning(String),
    /// The call failed.
    Call(String),
    /// Bad arguments.
    Usage(String),
    /// Stdout cannot be written.
    Output(std::io::Error),
}

impl Failure {
    fn exit(self) -> ExitCode {
        match self {
            Failure::NotRunning(m) => {
                note!("nyx: {m}");
                ExitCode::from(3)
            }
            Failure::Call(m) => {
                note!("nyx: {m}");
                ExitCode::FAILURE
            }
            Failure::Usage(m) => {
                note!("nyx: {m}");
                ExitCode::from(2)
            }
            // The reader went away (`nyx metrics | head`): it has what it wanted.
            Failure::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Failure::Output(e) => {
                note!("nyx: cannot write the output: {e}");
                ExitCode::FAILURE
            }
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Output(e)
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        if s.code() == tonic::Code::Unavailable && s.message().contains("transport") {
            return Failure::NotRunning(format!("the daemon went away: {}", s.message()));
        }
        Failure::Call(format!("{:?}: {}", s.code(), s.message()))
    }
}

pub(crate) async fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Testnet(args) => crate::testnet::run(args, cli.json).await,
        command => match client(cli.control).await {
            Ok(client) => call(client, command, cli.json).await,
            Err(f) => Err(f),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.exit(),
    }
}

fn default_socket() -> Result<PathBuf, Failure> {
    nyx_daemon::daemon::files::default_data_dir()
        .map(|d| d.join(nyx_daemon::daemon::files::CONTROL_SOCKET))
        .map_err(|e| Failure::Usage(format!("{e}; give the socket with --control")))
}

async fn client(path: Option<PathBuf>) -> Result<ControlClient<Channel>, Failure> {
    let path = match path {
        Some(p) => p,
        None => default_socket()?,
    };
    nyx_daemon::control::connect(&path)
        .await
        .map_err(|e| Failure::NotRunning(e.to_string()))
}

async fn call(mut c: ControlClient<Channel>, command: Command, json: bool) -> Result<(), Failure> {
    let mut out = std::io::stdout();
    match command {
        Command::Status => {
            let info = c.get_info(pb::GetInfoRequest {}).await?.into_inner();
            output::status(&mut out, &info, json)?;
        }
        Command::Peers => {
            let r = c.list_peers(pb::ListPeersRequest {}).await?.into_inner();
            output::peers(&mut out, &r, json)?;
        }
        Command::Circuits => {
            let r = c
                .list_circuits(pb::ListCircuitsRequest {})
                .await?
                .into_inner();
            output::circuits(&mut out, &r, json)?;
        }
        Command::Circuit {
            action: CircuitAction::Build { target },
        } => {
            let r = c
                .build_circuit(pb::BuildCircuitRequest {
                    target: target.unwrap_or_default(),
                })
                .await?
                .into_inner();
            output::circuit_built(&mut out, &r, json)?;
        }
        Command::Circuit {
            action: CircuitAction::Close { id },
        } => {
            c.close_circuit(pb::CloseCircuitRequest { id }).await?;
            output::done(&mut out, &format!("circuit {id} closed"), json)?;
        }
        Command::Streams => {
            let r = c
                .list_streams(pb::ListStreamsRequest {})
                .await?
                .into_inner();
            let stats = c
                .get_stream_stats(pb::GetStreamStatsRequest {})
                .await?
                .into_inner();
            output::streams(&mut out, &r, &stats, json)?;
        }
        Command::Stream {
            action: StreamAction::Close { id },
        } => {
            c.close_stream(pb::CloseStreamRequest { id }).await?;
            output::done(&mut out, &format!("stream {id} closed"), json)?;
        }
        Command::Events => {
            let mut events = c
                .subscribe_events(pb::SubscribeEventsRequest {})
                .await?
                .into_inner();
            while let Some(event) = events.message().await? {
                output::event(&mut out, &event, json)?;
            }
        }
        Command::Metrics => {
            let r = c.get_metrics(pb::GetMetricsRequest {}).await?.into_inner();
            output::metrics(&mut out, &r, json)?;
        }
        Command::Config {
            action: ConfigAction::Show,
        } => {
            let r = c.get_config(pb::GetConfigRequest {}).await?.into_inner();
            output::config(&mut out, &r, json)?;
        }
        Command::Config {
            action: ConfigAction::Reload,
        } => {
            let r = c
                .reload_config(pb::ReloadConfigRequest {})
                .await?
                .into_inner();
            output::reloaded(&mut out, &r, json)?;
        }
        Command::LogLevel { level } => {
            let r = c
                .set_log_level(pb::SetLogLevelRequest {
                    level: level.clone(),
                })
                .await?
                .into_inner();
            output::done(
                &mut out,
                &format!("log level {level} (was {})", r.previous),
                json,
            )?;
        }
        Command::Shutdown => {
            c.shutdown(pb::ShutdownRequest {}).await?;
            output::done(&mut out, "the daemon is stopping", json)?;
        }
        Command::Connect { target, isolation } => connect(c, target, isolation).await?,
        Command::Testnet(_) | Command::Daemon(_) => {
            return Err(Failure::Usage(
                "this command does not talk to a daemon".into(),
            ));
        }
    }
    out.flush()?;
    Ok(())
}

/// Pipe stdin to the stream and the stream to stdout until both directions end.
async fn connect(
    mut c: ControlClient<Channel>,
    target: String,
    isolation: Option<String>,
) -> Result<(), Failure> {
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::StreamRequest>(16);
    let open = pb::StreamRequest {
        msg: Some(pb::stream_request::Msg::Open(pb::OpenTarget {
            target: target.clone(),
            isolation: isolation.unwrap_or_default(),
        })),
    };
    tx.send(open)
        .await
        .map_err(|_| Failure::Call("cannot send the request".into()))?;
    let mut responses = c
        .open_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    match responses.message().await? {
        Some(pb::StreamResponse {
            msg: Some(pb::stream_response::Msg::Opened(opened)),
        }) => {
            let path: Vec<&str> = opened.hops.iter().map(|h| h.nickname.as_str()).collect();
            note!(
                "nyx: connected to {target} (stream {}, via {})",
                opened.stream_id,
                path.join(" > ")
            );
        }
        _ => return Err(Failure::Call("the daemon did not open the stream".into())),
    }
    let upload = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => return, // dropping `tx` half-closes the stream
                Ok(n) => {
                    let msg = pb::StreamRequest {
                        msg: Some(pb::stream_request::Msg::Data(buf[..n].to_vec())),
                    };
                    if tx.send(msg).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut stdout = tokio::io::stdout();
    let result = async {
        while let Some(msg) = responses.message().await? {
            if let Some(pb::stream_response::Msg::Data(data)) = msg.msg {
                stdout.write_all(&data).await?;
                stdout.flush().await?;
            }
        }
        Ok::<(), Failure>(())
    }
    .await;
    upload.abort();
    result
}
