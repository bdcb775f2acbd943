//! LLaVA's `expand2square`: an image centred on a square canvas of one colour, as
//! `Image.new(mode, (side, side), colour).paste(image, offset)` makes it, the offset of the
//! shorter side `(longer − shorter) // 2`.

use image::RgbImage;

/// `image` on a `side × side` canvas of `colour`, `side` its longer side; a square image as
/// it is.
pub fn expand_to_square(image: &RgbImage, colour: [u8; 3]) -> RgbImage {
    let (w, h) = (image.width(), image.height());
    if w == h {
        return image.clone();
    }
    let side = w.max(h);
    let (left, top) = ((side - w) / 2, (side - h) / 2);
    let mut square = RgbImage::from_pixel(side, side, image::Rgb(colour));
    image::imageops::replace(&mut square, image, i64::from(left), i64::from(top));
    square
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shorter_side_is_centred_with_the_smaller_margin_first() {
        let image = RgbImage::from_pixel(5, 2, image::Rgb([9, 9, 9]));
        let square = expand_to_square(&image, [1, 2, 3]);
        assert_eq!(square.dimensions(), (5, 5));
        // (5 − 2) // 2 = 1 row above, 2 below.
        let rows: Vec<bool> = (0..5).map(|y| square.get_pixel(0, y).0 == [9, 9, 9]).collect();
        assert_eq!(rows, [false, true, true, false, false]);
        assert_eq!(square.get_pixel(4, 4).0, [1, 2, 3]);
        let tall = expand_to_square(&RgbImage::from_pixel(1, 4, image::Rgb([9, 9, 9])), [0, 0, 0]);
        let columns: Vec<bool> = (0..4).map(|x| tall.get_pixel(x, 3).0 == [9, 9, 9]).collect();
        assert_eq!(columns, [false, true, false, false]);
    }
}
