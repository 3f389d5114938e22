"""doctor"""
