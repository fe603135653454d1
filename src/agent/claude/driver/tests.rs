use super::*;

#[test]
fn the_close_steps_split_the_grace_in_order() {
    let grace = std::time::Duration::from_nanos(3);
    assert_eq!(
        <Driver as Protocol>::CLOSE_STEPS,
        [CloseStep::EndSession, CloseStep::CloseStdin]
    );
    let waits: Vec<u128> = <Driver as Protocol>::CLOSE_STEPS
        .iter()
        .map(|s| s.wait(grace).as_nanos())
        .collect();
    assert_eq!(waits, vec![1, 2], "end_session gets half, stdin the rest");
}
