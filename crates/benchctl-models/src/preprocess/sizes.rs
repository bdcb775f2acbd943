//! The sizes the resizes that keep an image's own aspect ratio give it, each computed as its
//! reference computes it (Python's float arithmetic and rounding).

/// The widest aspect ratio `qwen_vl_utils.smart_resize` accepts.
pub const NATIVE_MAX_ASPECT: f64 = 200.0;

/// `qwen_vl_utils.smart_resize` of an image `height × width`: the `(height, width)` it is
/// resized to. Python's `round` (half to even) and float arithmetic, as there.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> (usize, usize) {
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let round = |x: f64| ((x / f).round_ties_even() * f) as usize;
    let (mut h_bar, mut w_bar) = (factor.max(round(h)), factor.max(round(w)));
    if h_bar * w_bar > max_pixels {
        let beta = (h * w / max_pixels as f64).sqrt();
        (h_bar, w_bar) = (((h / beta / f).floor() * f) as usize, ((w / beta / f).floor() * f) as usize);
    } else if h_bar * w_bar < min_pixels {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        (h_bar, w_bar) = (((h * beta / f).ceil() * f) as usize, ((w * beta / f).ceil() * f) as usize);
    }
    (h_bar, w_bar)
}

/// `Siglip2ImageProcessor`'s `get_image_size_for_max_num_patches` of an image `height ×
/// width`: the `(height, width)` it is resized to, both multiples of `patch`, at most
/// `max_patches` patches. A bisection of the scale between 1e-6 and 100 down to 1e-5, in
/// Python's float arithmetic, as there.
pub fn patch_grid_size(height: usize, width: usize, patch: usize, max_patches: usize) -> (usize, usize) {
    const EPS: f64 = 1e-5;
    let p = patch as f64;
    let scaled = |scale: f64, side: usize| (((side as f64 * scale) / p).ceil() as usize * patch).max(patch);
    let (mut low, mut high) = (EPS / 10.0, 100.0);
    while high - low >= EPS {
        let scale = (low + high) / 2.0;
        let patches = (scaled(scale, height) as f64 / p) * (scaled(scale, width) as f64 / p);
        if patches <= max_patches as f64 {
            low = scale;
        } else {
            high = scale;
        }
    }
    (scaled(low, height), scaled(low, width))
}
