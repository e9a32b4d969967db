//! The overlay's view: one node holds links to two peers, one over QUIC and one over UDP, as
//! `Arc<dyn CellLink>`, and receives from both on one `Inbound` channel.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::link::LinkKey;
use nyx_transport::link::{CellLink, Inbound, Message, UdpLink, drive_quic_link};
use nyx_transport::quic::{QuicConfig, QuicEndpoint};
use nyx_transport::udp::{UdpCommand, UdpTransport};
use nyx_transport::udp::{UdpConfig, UdpEvent};
use tokio::sync::mpsc;

fn id(seed: u8) -> Arc<IdentityKey> {
    Arc::new(IdentityKey::from_seed(&[seed; 32]))
}

#[tokio::test]
async fn one_interface_over_both_transports() {
    let (me, quic_peer, udp_peer) = (id(1), id(2), id(3));
    let (inbound_tx, mut inbound) = mpsc::channel::<Inbound>(256);

    // QUIC: me -> quic_peer.
    let my_quic = QuicEndpoint::bind(
        "127.0.0.2:0".parse().unwrap(),
        me.clone(),
        QuicConfig::default(),
    )
    .unwrap();
    let their_quic = QuicEndpoint::bind(
        "127.0.0.3:0".parse().unwrap(),
        quic_peer.clone(),
        QuicConfig::default(),
    )
    .unwrap();
    let addr = their_quic.local_addr().unwrap();
    let (mine, theirs) = tokio::join!(my_quic.connect(quic_peer.node_id(), addr), async {
        their_quic.accept().await.unwrap()
    });
    let (mine, theirs) = (mine.unwrap(), theirs.unwrap());
    tokio::spawn(drive_quic_link(mine.clone(), inbound_tx.clone()));
    // The peer's side, driven into a channel of its own.
    let (their_tx, mut their_inbound) = mpsc::channel::<Inbound>(256);
    tokio::spawn(drive_quic_link(theirs.clone(), their_tx));
    let mut their_next = async || {
        tokio::time::timeout(Duration::from_secs(5), their_inbound.recv())
            .await
            .unwrap()
            .unwrap()
            .message
    };

    // UDP: me -> udp_peer.
    let key = |seed: u8| LinkKey::new(HybridSecretKey::from_seed(&[seed; 96]));
    let mine_udp = UdpTransport::bind(
        "127.0.0.2:0".parse().unwrap(),
        me.clone(),
        vec![key(1)],
        UdpConfig::default(),
    )
    .unwrap();
    let theirs_udp = UdpTransport::bind(
        "127.0.0.4:0".parse().unwrap(),
        udp_peer.clone(),
        vec![key(3)],
        UdpConfig::default(),
    )
    .unwrap();
    let udp_addr = theirs_udp.local_addr().unwrap();
    let (my_cmd, my_cmd_rx) = mpsc::channel(256);
    let (my_ev_tx, mut my_ev) = mpsc::channel(256);
    let (their_cmd, their_cmd_rx) = mpsc::channel(256);
    let (their_ev_tx, mut their_ev) = mpsc::channel(256);
    tokio::spawn(mine_udp.run(my_cmd_rx, my_ev_tx));
    tokio::spawn(theirs_udp.run(their_cmd_rx, their_ev_tx));
    let peer_key = HybridSecretKey::from_seed(&[3; 96]).public().clone();
    my_cmd
        .send(UdpCommand::Connect {
            peer: udp_peer.node_id(),
            key: Box::new(peer_key),
            addr: udp_addr,
        })
        .await
        .unwrap();
    let UdpEvent::Connected { peer, addr } = my_ev.recv().await.unwrap() else {
        panic!("not connected")
    };
    let their_side = their_ev.recv().await.unwrap();
    let UdpEvent::Connected { addr: my_addr, .. } = their_side else {
        panic!("{their_side:?}")
    };
    // UDP cells from the peer join the same inbound channel.
    let udp_inbound = inbound_tx.clone();
    tokio::spawn(async move {
        while let Some(event) = my_ev.recv().await {
            let inbound = match event {
                UdpEvent::Cell { peer, data } => Inbound {
                    peer,
                    message: Message::Cell(data),
                },
                UdpEvent::Control { peer, data } => Inbound {
                    peer,
                    message: Message::Control(data),
                },
                _ => continue,
            };
            let _ = udp_inbound.send(inbound).await;
        }
    });

    // The overlay's view: two links, one interface.
    let links: Vec<Arc<dyn CellLink>> = vec![
        mine.clone(),
        Arc::new(UdpLink::new(peer, addr, my_cmd.clone())),
    ];
    assert_eq!(links[0].peer(), quic_peer.node_id());
    assert_eq!(links[1].peer(), udp_peer.node_id());
    for link in &links {
        link.send_cell(Bytes::from_static(b"hello peer")).unwrap();
    }
    assert_eq!(
        their_next().await,
        Message::Cell(Bytes::from_static(b"hello peer"))
    );
    let UdpEvent::Cell { data, .. } = tokio::time::timeout(Duration::from_secs(5), their_ev.recv())
        .await
        .unwrap()
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(&data[..], b"hello peer");

    // Replies from both arrive on one channel, tagged with the verified sender.
    theirs.send_cell(Bytes::from_static(b"via quic")).unwrap();
    their_cmd
        .send(UdpCommand::Cell {
            addr: my_addr,
            cell: Bytes::from_static(b"via udp"),
        })
        .await
        .unwrap();
    theirs.send_control(b"quic control").unwrap();
    their_cmd
        .send(UdpCommand::Control {
            addr: my_addr,
            msg: b"udp control".to_vec(),
        })
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        let i = tokio::time::timeout(Duration::from_secs(5), inbound.recv())
            .await
            .unwrap()
            .unwrap();
        got.push((i.peer, format!("{:?}", i.message)));
    }
    got.sort();
    let q = quic_peer.node_id();
    let u = udp_peer.node_id();
    let mut want = vec![
        (
            q,
            format!("{:?}", Message::Cell(Bytes::from_static(b"via quic"))),
        ),
        (
            u,
            format!("{:?}", Message::Cell(Bytes::from_static(b"via udp"))),
        ),
        (
            q,
            format!("{:?}", Message::Control(b"quic control".to_vec())),
        ),
        (
            u,
            format!("{:?}", Message::Control(b"udp control".to_vec())),
        ),
    ];
    want.sort();
    assert_eq!(got, want);

    // Control messages through the common interface, both transports, in order.
    for link in &links {
        for i in 0..5u8 {
            link.send_control(vec![i]).unwrap();
        }
    }
    let mut quic_got = Vec::new();
    for _ in 0..5 {
        quic_got.push(their_next().await);
    }
    let want: Vec<Message> = (0..5).map(|i| Message::Control(vec![i])).collect();
    assert_eq!(quic_got, want);
    let mut udp_got = Vec::new();
    while udp_got.len() < 5 {
        if let UdpEvent::Control { data, .. } =
            tokio::time::timeout(Duration::from_secs(5), their_ev.recv())
                .await
                .unwrap()
                .unwrap()
        {
            udp_got.push(data[0]);
        }
    }
    assert_eq!(udp_got, vec![0, 1, 2, 3, 4]);
}
