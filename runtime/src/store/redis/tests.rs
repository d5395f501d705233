use super::RedisStore;

/// Calls on one key take one connection, so Redis applies them in
/// order; keys spread over the connections.
#[test]
fn a_key_always_takes_the_same_connection() {
    let store = RedisStore::new(
        "redis://127.0.0.1:1",
        "t",
        4,
        std::time::Duration::from_secs(1),
    )
    .expect("store");
    let mut used = std::collections::HashSet::new();
    for n in 0..64 {
        let key = format!("key{n}");
        let slot = store.slot_for(Some(&key));
        for _ in 0..8 {
            assert_eq!(store.slot_for(Some(&key)), slot, "{key}");
        }
        used.insert(slot);
    }
    assert_eq!(used.len(), 4);
    let turns: std::collections::HashSet<usize> = (0..4).map(|_| store.slot_for(None)).collect();
    assert_eq!(turns.len(), 4);
}
