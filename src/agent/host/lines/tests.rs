use super::*;

async fn all(input: &[u8], max: usize, kept: usize) -> Vec<Frame> {
    let mut reader = LineReader::new(input, max, kept);
    let mut frames = Vec::new();
    while let Some(frame) = reader.next().await.expect("reads") {
        frames.push(frame);
    }
    frames
}

#[tokio::test]
async fn an_oversized_line_comes_out_as_its_length_and_start_and_the_next_is_read() {
    let mut input = vec![b'x'; 10 * 1024 * 1024];
    input.extend_from_slice(b"\n{\"a\":1}\nlast without newline");
    let frames = all(&input, MAX_LINE_BYTES, KEPT_BYTES).await;
    assert_eq!(
        frames,
        [
            Frame::Oversized {
                bytes: 10 * 1024 * 1024,
                start: vec![b'x'; KEPT_BYTES],
            },
            Frame::Line(b"{\"a\":1}".to_vec()),
            Frame::Line(b"last without newline".to_vec()),
        ]
    );
}

#[tokio::test]
async fn a_line_of_exactly_the_bound_is_whole_and_one_more_byte_is_not() {
    let frames = all(b"abcd\nabcde\n\n", 4, 2).await;
    assert_eq!(
        frames,
        [
            Frame::Line(b"abcd".to_vec()),
            Frame::Oversized {
                bytes: 5,
                start: b"ab".to_vec(),
            },
            Frame::Line(Vec::new()),
        ]
    );
    assert!(frames[2].is_blank());
    assert!(!frames[1].is_blank());
}

#[tokio::test]
async fn an_oversized_line_is_never_held_whole() {
    // Read through a small buffer, so the line comes in many pieces: the
    // kept start never grows past its bound, however many come.
    let input = vec![b'y'; 1 << 20];
    let reader = tokio::io::BufReader::with_capacity(64, &input[..]);
    let mut reader = LineReader::new(reader, 100, 10);
    let frame = reader.next().await.expect("reads").expect("a line");
    assert_eq!(
        frame,
        Frame::Oversized {
            bytes: 1 << 20,
            start: vec![b'y'; 10],
        }
    );
    assert_eq!(reader.next().await.expect("reads"), None);
}
