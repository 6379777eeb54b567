"""OCR: documents (images, PDFs) decoded under limits, and OCR engines (RapidOCR, Tesseract)."""
